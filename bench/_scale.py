"""Memory and cost as a job grows: CPU and cyclic objects per rollout, peak RSS.

Run by `bench/rollouts.py` (its scale table); alone, one measurement:

    .venv/bin/python bench/_scale.py MODE N RESULT.json

Each measurement runs in its own interpreter, so its peak RSS (ru_maxrss) is its own.
The rows are the same 1,000 trivial tasks whatever N (`bench/envs/proctor_env.py`, or
the batch's echo environment), each run N / 1,000 times as one group, so what grows
with N is what the engine keeps per rollout, not the input. Modes:

- `keep`: `Taskset.run(keep="runs")`, every `Run` kept in the `Job` (the default);
- `summaries`: `Taskset.run(keep="summaries", sink=...)`, a `RunSummary` per run and a
  sink that drops each run (a store would write it);
- `none`: `Taskset.run(keep="none", sink=...)`, only the job's statistics;
- `run`: the `proctor run` command (in this interpreter), `--group N / 1,000`, every
  rollout recorded into a new output folder;
- `batch`: `proctor.batch.execute` on a config with `repeats = N / 1,000`, every rollout
  recorded into a new output folder (the runner keeps no run).

Figures: CPU ms per rollout (process time over the run, flush threads included),
objects per rollout that the cycle collector freed during the run (`gc.callbacks`),
RSS before the first rollout and at its peak.
"""

from __future__ import annotations

import asyncio
import gc
import json
import os
import resource
import shutil
import subprocess
import sys
import tempfile
import textwrap
import time
from pathlib import Path
from typing import Any

BENCH = Path(__file__).resolve().parent
ROWS = 1000
CONCURRENCY = 50
MODES = ("keep", "summaries", "none", "run", "batch")

ENV = """
from proctor import Environment

bench = Environment("bench-echo", version="1.0.0")


@bench.template
async def echo(text: str):
    answer = yield text
    yield 1.0 if answer == text else 0.0
"""
AGENT = "from proctor.agents import agent_from_fn\n\nsolve = agent_from_fn(str)\n"


class _Cycles:
    """Objects the cycle collector freed while installed."""

    def __init__(self) -> None:
        self.freed = 0

    def __call__(self, phase: str, info: dict[str, Any]) -> None:
        if phase == "stop":
            self.freed += info["collected"]


def _rss_mb() -> float:
    with open("/proc/self/status") as f:
        kb = next(int(line.split()[1]) for line in f if line.startswith("VmRSS:"))
    return kb / 1024


def _measure(n: int, run: Any) -> dict[str, Any]:
    """Run `run()` (the whole job) with the cycle collector counted."""
    gc.collect()
    cycles, before = _Cycles(), _rss_mb()
    gc.callbacks.append(cycles)
    c0, t0 = time.process_time(), time.perf_counter()
    try:
        ok = run()
    finally:
        gc.callbacks.remove(cycles)
    cpu, wall = time.process_time() - c0, time.perf_counter() - t0
    return {
        "n": n,
        "ok": ok,
        "cpu_ms": cpu / n * 1e3,
        "wall_s": wall,
        "cyclic": cycles.freed / n,
        "rss_before_mb": before,
        "rss_peak_mb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024,
    }


def taskset(mode: str, n: int) -> dict[str, Any]:
    """`Taskset.run` over the 1,000 rows, `n / 1,000` times each."""
    sys.path.insert(0, str(BENCH / "envs"))
    from proctor_env import answer42, env

    from proctor import LocalRuntime, Taskset

    class FortyTwo:
        async def __call__(self, run: Any) -> None:
            run.trace.content = "42"

    tasks = Taskset("t", [answer42(i=i) for i in range(ROWS)])
    keep = "runs" if mode == "keep" else mode
    sink = None if mode == "keep" else (lambda run: None)

    async def go() -> int:
        runtime = LocalRuntime(env)
        warm = Taskset("w", [answer42(i=-1 - k) for k in range(100)])
        await warm.run(FortyTwo(), runtime=runtime, max_concurrent=CONCURRENCY)
        del warm
        job = await tasks.run(
            FortyTwo(),
            runtime=runtime,
            group=n // ROWS,
            max_concurrent=CONCURRENCY,
            keep=keep,  # type: ignore[arg-type]
            sink=sink,
        )
        return job.stats.graded

    return _measure(n, lambda: asyncio.run(go()))


def _workspace(root: Path) -> None:
    """The echo environment, the agent and the 1,000 rows under `root`."""
    (root / "env.py").write_text(textwrap.dedent(ENV).lstrip())
    (root / "agent.py").write_text(AGENT)
    with open(root / "tasks.jsonl", "w") as f:
        for i in range(ROWS):
            row = {"env": "bench-echo", "id": "echo", "args": {"text": f"hello {i}"}}
            f.write(json.dumps({**row, "slug": f"echo-{i:04d}"}) + "\n")


def command(n: int) -> dict[str, Any]:
    """`proctor run` with every rollout recorded (its summary as JSON, to a file)."""
    import contextlib

    from proctor.cli import main as cli

    root = Path(tempfile.mkdtemp(prefix="bench-scale-"))
    try:
        _workspace(root)
        argv = ["run", str(root / "tasks.jsonl"), "--env-source", str(root / "env.py")]
        argv += ["--agent", f"{root / 'agent.py'}:solve", "--group", str(n // ROWS)]
        argv += ["--max-concurrent", str(CONCURRENCY), "--output-dir", str(root / "out")]

        def go() -> int:
            out = root / "summary.json"
            with (
                open(out, "w") as f,
                open(os.devnull, "w") as null,
                contextlib.redirect_stdout(f),
                contextlib.redirect_stderr(null),
            ):
                code = cli([*argv, "--json"])
            if code:
                raise SystemExit(f"proctor run exited {code}")
            return int(json.loads(out.read_text())["graded"])

        return _measure(n, go)
    finally:
        shutil.rmtree(root, ignore_errors=True)


def batch(n: int) -> dict[str, Any]:
    """`proctor.batch.execute` with every rollout recorded."""
    from proctor.batch import execute
    from proctor.store import count_rollouts

    root = Path(tempfile.mkdtemp(prefix="bench-scale-"))
    try:
        _workspace(root)
        config = {
            "name": "scale",
            "taskset": {"source": "tasks.jsonl", "env_source": "env.py"},
            "agents": [{"kind": "python", "agent": "agent.py:solve"}],
            "runtime": {"kind": "local", "trusted": True},
            "max_concurrent": CONCURRENCY,
            "repeats": n // ROWS,
            "expected_rollouts": n,
        }
        (root / "batch.json").write_text(json.dumps(config))

        def go() -> int:
            result = execute(root / "batch.json", root / "out")
            if not result.launched:
                raise SystemExit(f"the batch did not launch:\n{result.to_json()}")
            return int(count_rollouts(str(root / "out"), by="status").get("completed", 0))

        return _measure(n, go)
    finally:
        shutil.rmtree(root, ignore_errors=True)


def measure(mode: str, n: int, tmp: Path, timeout: float) -> dict[str, Any]:
    """One mode at one size, in a fresh interpreter."""
    out = tmp / f"scale-{mode}-{n}.json"
    cmd = [sys.executable, __file__, mode, str(n), str(out)]
    env = {**os.environ, "PYTHONPATH": str(BENCH.parent / "src")}
    try:
        done = subprocess.run(cmd, env=env, timeout=timeout, capture_output=True, text=True)
    except subprocess.TimeoutExpired:
        return {"n": n, "error": f"over {timeout:.0f} s"}
    if done.returncode != 0:
        return {"n": n, "error": (done.stderr.strip().splitlines() or ["?"])[-1]}
    return dict(json.loads(out.read_text()))


def section(
    sizes: list[int], batch_sizes: list[int], tmp: Path, timeout: float, log: Any
) -> tuple[list[str], dict[str, list[dict[str, Any]]]]:
    """Every mode at its sizes; the table's lines and the raw figures."""
    raw: dict[str, list[dict[str, Any]]] = {}
    for mode in MODES:
        for n in batch_sizes if mode == "batch" else sizes:
            log(f"scale: {mode} at {n:,} ...")
            raw.setdefault(mode, []).append(measure(mode, n, tmp, timeout))
    return table(raw), raw


def table(raw: dict[str, list[dict[str, Any]]]) -> list[str]:
    """One line per mode and size; each mode's RSS growth from its smallest size."""
    head = (
        f"{'mode':<10} {'rollouts':>9} {'CPU ms/ro':>10} {'cyclic/ro':>10} "
        f"{'RSS before':>11} {'RSS peak':>9} {'peak/smallest':>14}"
    )
    lines = [head, "-" * len(head)]
    for mode, rows in raw.items():
        first = next((r["rss_peak_mb"] for r in rows if "error" not in r), None)
        for r in rows:
            if "error" in r:
                lines.append(f"{mode:<10} {r['n']:>9,} error: {r['error']}")
                continue
            flat = f"{r['rss_peak_mb'] / first:.2f}x" if first else "-"
            bad = "" if r["ok"] == r["n"] else f"  ({r['ok']} of {r['n']} graded!)"
            lines.append(
                f"{mode:<10} {r['n']:>9,} {r['cpu_ms']:>10.3f} {r['cyclic']:>10.2f} "
                f"{r['rss_before_mb']:>9.1f}MB {r['rss_peak_mb']:>7.1f}MB {flat:>14}{bad}"
            )
    return lines


def main() -> None:
    mode, n, out = sys.argv[1], int(sys.argv[2]), Path(sys.argv[3])
    if mode not in MODES or n < ROWS or n % ROWS:
        raise SystemExit(f"usage: _scale.py {{{','.join(MODES)}}} N OUT (N a multiple of {ROWS})")
    if mode == "batch":
        result = batch(n)
    elif mode == "run":
        result = command(n)
    else:
        result = taskset(mode, n)
    out.write_text(json.dumps(result))


if __name__ == "__main__":
    main()
