"""SandboxRuntime figures for the substrate budgets (DESIGN 8, issue: sandbox <= 25 ms
start-to-ready, >= 50 isolated rollouts/s on 2 cores):

    .venv/bin/python bench/_sandbox_probe.py [--quick] [--json PATH]

Drives `bench/envs/proctor_env.py` (one trivial template) with a trivial agent, for
each mode: cold (one bwrap per rollout) and warm (forked from a zygote in a sandbox),
network none and host. Per mode:

- start-to-ready: sequential rollouts' substrate up to a served `hello` (entering the
  provider, then `connect` + `hello`), p50 and p90;
- rollouts/s: `run_taskset` of N rows at max_concurrent 8 and 32, wall clock;
- CPU per rollout (at 8): this process plus every sandbox process (for warm, the
  zygote sandbox's tree with what it reaped; for cold, the reaped bwraps), so the
  figure holds however busy the machine is; `2 cores / CPU per rollout` is the
  ceiling on an idle 2-core machine (kernel threads' namespace cleanup not counted);
- peak RSS: the largest VmHWM of a rollout's server process (read from /proc by pid
  namespace while it runs), and the zygote sandbox's own processes for warm.

Run on an otherwise idle machine; progress to stderr, the table to stdout.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import os
import resource
import statistics
import sys
import time
from pathlib import Path
from typing import Any

from proctor import Task
from proctor.agents import agent_from_fn
from proctor.channel import connect
from proctor.engine import run_taskset
from proctor.runtimes._sandbox import SandboxRuntime

SOURCE = Path(__file__).resolve().parent / "envs" / "proctor_env.py"
TASK = Task(env="bench", id="answer42")
AGENT = agent_from_fn(lambda prompt: "42")


def _pct(samples: list[float], q: float) -> float:
    ordered = sorted(samples)
    return ordered[max(0, round(q * len(ordered)) - 1)]


def _hwm_kb(pid: int) -> int:
    with contextlib.suppress(OSError, StopIteration):
        status = Path(f"/proc/{pid}/status").read_text().splitlines()
        return int(next(ln for ln in status if ln.startswith("VmHWM:")).split()[1])
    return 0


def _rollout_servers(runtime: SandboxRuntime) -> list[int]:
    """Host pids of processes that are the first of their pid namespace, for this runtime."""
    found = []
    for entry in os.scandir("/proc"):
        if not entry.name.isdigit():
            continue
        with contextlib.suppress(OSError):
            status = Path(entry.path, "status").read_text()
            nspid = next(ln for ln in status.splitlines() if ln.startswith("NSpid:")).split()
            if (
                len(nspid) > 2
                and nspid[-1] == "1"
                and "_sandbox" in Path(entry.path, "cmdline").read_text()
            ):
                found.append(int(entry.name))
    return found


async def start_to_ready(runtime: SandboxRuntime, n: int) -> tuple[list[float], int]:
    samples, peak = [], 0
    for _ in range(n):
        t0 = time.perf_counter()
        async with runtime(TASK) as endpoint, connect(endpoint.target) as client:
            samples.append(time.perf_counter() - t0)
            assert client.manifest is not None
            peak = max([peak, *(_hwm_kb(p) for p in _rollout_servers(runtime))])
    return samples, peak


def _cpu(runtime: SandboxRuntime) -> float:
    """CPU seconds so far of this process, its reaped children and the zygote's tree."""
    total = 0.0
    for who in (resource.RUSAGE_SELF, resource.RUSAGE_CHILDREN):
        usage = resource.getrusage(who)
        total += usage.ru_utime + usage.ru_stime
    zygote = runtime._zygote
    if zygote is not None and zygote.proc.pid is not None:
        tick = os.sysconf("SC_CLK_TCK")
        for pid in _tree(zygote.proc.pid):
            with contextlib.suppress(OSError):
                stat = Path(f"/proc/{pid}/stat").read_text()
                total += sum(map(int, stat[stat.rindex(")") + 2 :].split()[11:15])) / tick
    return total


async def throughput(runtime: SandboxRuntime, n: int, concurrency: int) -> dict[str, Any]:
    cpu0, t0 = _cpu(runtime), time.perf_counter()
    job = await run_taskset([TASK] * n, AGENT, runtime=runtime, max_concurrent=concurrency)
    elapsed, cpu = time.perf_counter() - t0, _cpu(runtime) - cpu0
    graded = sum(run.reward == 1.0 for run in job.runs)
    errors = [run.error for run in job.runs if run.error is not None][:3]
    return {"n": n, "graded": graded, "seconds": elapsed, "per_s": n / elapsed,
            "cpu_ms": cpu / n * 1e3, "errors": errors}  # fmt: skip


async def mode(warm: bool, network: str, quick: bool) -> dict[str, Any]:
    seq = (10 if warm else 5) if quick else (100 if warm else 30)
    rows = (50 if warm else 16) if quick else (400 if warm else 96)
    label = f"{'warm' if warm else 'cold'}/{network}"
    print(f"{label}: {seq} sequential, then {rows} rows at 8 and 32", file=sys.stderr)
    t0 = time.perf_counter()
    async with SandboxRuntime(SOURCE, warm=warm, network=network) as runtime:
        prepared = time.perf_counter() - t0
        await start_to_ready(runtime, 2)  # warm the page cache and the loop
        samples, peak = await start_to_ready(runtime, seq)
        at8 = await throughput(runtime, rows, 8)
        at32 = await throughput(runtime, rows, 32)
        zygote_kb = 0
        if runtime._zygote is not None and runtime._zygote.proc.pid is not None:
            zygote_kb = sum(_hwm_kb(p) for p in _tree(runtime._zygote.proc.pid))
    return {
        "mode": label,
        "prepare_s": prepared,
        "ready_p50_ms": statistics.median(samples) * 1e3,
        "ready_p90_ms": _pct(samples, 0.9) * 1e3,
        "at8": at8,
        "at32": at32,
        "rollout_hwm_kb": peak,
        "zygote_hwm_kb": zygote_kb,
    }


def _tree(root: int) -> list[int]:
    children: dict[int, list[int]] = {}
    for entry in os.scandir("/proc"):
        with contextlib.suppress(OSError):
            stat = Path(entry.path, "stat").read_text()
            if entry.name.isdigit():
                children.setdefault(int(stat[stat.rindex(")") + 2 :].split()[1]), []).append(
                    int(entry.name)
                )
    out, todo = [root], [root]
    while todo:
        for child in children.get(todo.pop(), []):
            out.append(child)
            todo.append(child)
    return out


async def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("--json", type=Path, default=None)
    args = parser.parse_args()
    results = [
        await mode(warm, network, args.quick)
        for warm in (True, False)
        for network in ("none", "host")
    ]
    load = os.getloadavg()[0]
    print(f"SandboxRuntime on {os.cpu_count()} cores, user {os.geteuid()}, load {load:.1f}")
    print(
        f"{'mode':<10} {'ready p50':>10} {'p90':>8} {'roll/s @8':>10} {'@32':>8} "
        f"{'CPU/roll':>9} {'rollout RSS':>12} {'zygote RSS':>11}"
    )
    for r in results:
        print(
            f"{r['mode']:<10} {r['ready_p50_ms']:>8.1f}ms {r['ready_p90_ms']:>6.1f}ms "
            f"{r['at8']['per_s']:>10.1f} {r['at32']['per_s']:>8.1f} "
            f"{r['at8']['cpu_ms']:>7.1f}ms "
            f"{r['rollout_hwm_kb'] / 1024:>10.1f}MB {r['zygote_hwm_kb'] / 1024:>9.1f}MB"
        )
        for key in ("at8", "at32"):
            if r[key]["graded"] != r[key]["n"]:
                print(f"  {key}: only {r[key]['graded']}/{r[key]['n']} graded: {r[key]['errors']}")
    if args.json:
        args.json.write_text(json.dumps(results, indent=2, default=str))


if __name__ == "__main__":
    asyncio.run(main())
