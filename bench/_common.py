"""Harness shared by both benchmark sides; stdlib only, so it runs under either venv.

A side script is started once per section, in a fresh interpreter:
`PYTHON bench/_<side>_side.py --section NAME --params JSON --out FILE`. A section is
`inproc`, `subproc`, `warm:<loop>` or `newconn:<loop>` (loop: `asyncio` or `uvloop`);
its results, or its error, land in FILE as one JSON object.

One interpreter per section keeps the sections from shaping each other's process
state. That matters more than it seems: CPython's `sock.recv(256 KiB)` (asyncio's
read size) is served by mmap/mremap/munmap, three syscalls per read, until glibc's
dynamic mmap threshold rises, which the first full-size free (a read hitting EOF, say)
does. So a process's first TCP connection can cost twice the system time of its later
ones; the `warm` sections measure both.
"""

from __future__ import annotations

import argparse
import asyncio
import gc
import json
import logging
import math
import os
import resource
import sys
import time
import traceback
from collections.abc import Awaitable, Callable, Coroutine
from pathlib import Path
from typing import Any

BENCH = Path(__file__).resolve().parent
ENVS = BENCH / "envs"

Section = Callable[[dict[str, Any]], dict[str, Any]]


def pct(samples: list[float], q: float) -> float:
    """Nearest-rank percentile (q in 0..1)."""
    ordered = sorted(samples)
    return ordered[max(0, math.ceil(q * len(ordered)) - 1)]


def latency_ms(samples: list[float]) -> dict[str, Any]:
    """Summarize per-iteration latencies given in seconds, in milliseconds."""
    return {
        "n": len(samples),
        "p50_ms": pct(samples, 0.50) * 1e3,
        "p90_ms": pct(samples, 0.90) * 1e3,
        "p99_ms": pct(samples, 0.99) * 1e3,
        "mean_ms": sum(samples) / len(samples) * 1e3,
        "min_ms": min(samples) * 1e3,
    }


def children_cpu() -> float:
    """CPU seconds of reaped children (user + system)."""
    ru = resource.getrusage(resource.RUSAGE_CHILDREN)
    return ru.ru_utime + ru.ru_stime


def machine_cpu() -> float:
    """CPU seconds the whole machine has spent busy (every process, every core), from
    /proc/stat at USER_HZ (usually 10 ms) resolution; NaN where there is no /proc/stat.

    The one way to see the CPU of processes this one does not reap: children that a
    zygote forks with SIGCHLD ignored are reaped by the kernel, and their rusage is
    added to no one's RUSAGE_CHILDREN."""
    try:
        with open("/proc/stat") as f:
            fields = f.readline().split()
    except OSError:
        return math.nan
    user, nice, system, _idle, _iowait, irq, softirq = map(int, fields[1:8])
    return (user + nice + system + irq + softirq) / os.sysconf("SC_CLK_TCK")


async def timed_loop(
    body: Callable[[], Awaitable[Any]], iters: int, warmup: int
) -> tuple[list[float], float]:
    """Await `body()` `warmup` times, then `iters` times timing each; returns
    (latencies in seconds, process CPU seconds spent over the timed iterations)."""
    for _ in range(warmup):
        await body()
    gc.collect()
    samples: list[float] = []
    clock = time.perf_counter
    cpu0 = time.process_time()
    for _ in range(iters):
        t0 = clock()
        await body()
        samples.append(clock() - t0)
    return samples, time.process_time() - cpu0


def run_on(loop: str, make: Callable[[], Coroutine[Any, Any, dict[str, Any]]]) -> dict[str, Any]:
    """Run a coroutine on a fresh loop: `asyncio` (the default loop) or `uvloop`."""
    factory = None
    if loop == "uvloop":
        import uvloop

        factory = uvloop.new_event_loop
    with asyncio.Runner(loop_factory=factory) as runner:
        return runner.run(make())


def versions(dist: str) -> dict[str, Any]:
    """Version of `dist` and of uvloop in this venv, without importing either."""
    from importlib import metadata

    def version(name: str) -> str | None:
        try:
            return metadata.version(name)
        except metadata.PackageNotFoundError:
            return None

    return {"name": dist, "version": version(dist), "uvloop": version("uvloop")}


def main(sections: dict[str, Section], dist: str) -> None:
    """Run one section and write its results (or its error) as JSON."""
    parser = argparse.ArgumentParser()
    parser.add_argument("--section", required=True, help="inproc, subproc, warm:LOOP, ...")
    parser.add_argument("--params", default="{}", help="JSON parameters of the section")
    parser.add_argument("--out", required=True, help="file the JSON results go to")
    args = parser.parse_args()
    # Python 3.11 logs "Exception in callback ... CancelledError" tracebacks when a
    # stream server is torn down under a live handler (fixed in 3.12); formatting them
    # is interpreter noise, not framework work. Silenced identically on both sides.
    logging.getLogger("asyncio").setLevel(logging.CRITICAL)
    sys.path.insert(0, str(ENVS))
    base, _, variant = args.section.partition(":")
    info = versions(dist)
    t0 = time.perf_counter()
    out: dict[str, Any]
    if variant == "uvloop" and info["uvloop"] is None:
        out = {"skipped": "uvloop is not installed in this venv"}
    else:
        try:
            out = sections[base]({**json.loads(args.params), "variant": variant or "asyncio"})
        except Exception as exc:
            traceback.print_exc()
            out = {"error": f"{type(exc).__name__}: {exc}"}
    out["seconds"] = time.perf_counter() - t0
    Path(args.out).write_text(json.dumps({"framework": info, "section": out}, indent=1))


# -- the machine's pace, measured in the same run --------------------------------------------


def reap(start: Callable[[], int], n: int, in_flight: int) -> float:
    """Start `n` short-lived processes, at most `in_flight` at once; wall seconds."""
    t0, live = time.perf_counter(), 0
    for _ in range(n):
        if live >= in_flight:
            os.wait()
            live -= 1
        start()
        live += 1
    for _ in range(live):
        os.wait()
    return time.perf_counter() - t0


def fork_exit() -> int:
    """Fork a child that exits at once; its pid."""
    pid = os.fork()
    if pid == 0:
        os._exit(0)
    return pid


def python_pass(python: str) -> Callable[[], int]:
    """A starter of `python -c pass` processes; each call returns the pid."""
    env = dict(os.environ)
    return lambda: os.posix_spawn(python, [python, "-c", "pass"], env)


def baseline(n: int = 20, python: str = sys.executable) -> dict[str, Any]:
    """What a bare process costs on this machine right now, the yardstick for the rest.

    `pass_*`: a fresh `python -c pass`, spawn to reaped exit (p50 and p90 of `n`
    sequential, then starts/s with 8 in flight); `fork_*`: a bare `os.fork` whose child
    `_exit`s at once, the same way (10 x `n` of them). The load average comes with it.
    Call it from a process without threads (fork).
    """
    spawn = python_pass(python)
    out: dict[str, Any] = {"load": os.getloadavg()[0], "n": n}
    for name, start, count in (("pass", spawn, n), ("fork", fork_exit, 10 * n)):
        reap(start, 2, 1)  # the page cache
        walls = [reap(start, 1, 1) for _ in range(count)]
        out[f"{name}_p50_ms"] = pct(walls, 0.5) * 1e3
        out[f"{name}_p90_ms"] = pct(walls, 0.9) * 1e3
        out[f"{name}_per_s"] = count / reap(start, count, 8)
    return out


def baseline_line(b: dict[str, Any]) -> str:
    """One line for a report's header: the baseline and the load it was measured at."""
    return (
        f"baseline (same run, load average {b['load']:.2f}): `python -c pass` p50 "
        f"{b['pass_p50_ms']:.1f} ms, {b['pass_per_s']:.0f}/s at 8 in flight; bare fork+exit "
        f"p50 {b['fork_p50_ms']:.2f} ms, {b['fork_per_s']:.0f}/s"
    )
