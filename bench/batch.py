"""The batch path end to end: `proctor.batch.execute` on trivial rollouts.

    .venv/bin/python bench/batch.py [--sizes 1000,10000,100000] [--baseline]
        [--concurrency 64] [--profile N] [--dir PARENT] [--keep] [--json PATH]

A workspace in a temp folder holds an `echo` environment (`env.py`: the prompt is the
row's text, reward 1.0 for an answer equal to it), a JSONL taskset of N rows, a
scripted agent (`agent.py:solve`, `agent_from_fn` echoing the prompt) and a JSON batch
config (`kind = "python"` agent, local runtime, `max_concurrency`, `expected_rollouts =
N`, default durability). Each size runs in a fresh interpreter (`--row N`), so its peak
RSS is its own, and calls `execute(config, out)`: plan, a new output directory, every
rollout recorded (index, events, one record per rollout), reconcile, close. Figures:

- rollouts/s: N over the wall time of the whole `execute` call (planning and loading
  the taskset included), and `in loop` over the runner's own `wall_s` (the drain);
- CPU ms/rollout: the process's user + system time over the call (the store's flush
  thread included), over N; `sys` is the system time's share of it;
- first/last 10%: wall ms per rollout of the first and the last tenth to end (from the
  index's `ended_at`): flat means no growth within a run;
- RSS: peak resident set (ru_maxrss) of the row's interpreter;
- bytes/rollout: every file and folder of the output directory after the call, as
  allocated blocks (st_blocks * 512) and as apparent size (st_size), over N;
- every rollout must have completed with reward 1.0 (`count_rollouts`, the index).

`--baseline` adds, for each size, the same rollouts through `engine.run_taskset` with
the same agent, runtime and concurrency and nothing recorded (what `Taskset.run` does),
so the cost of recording is a ratio measured in the same run: `recorded / unrecorded
CPU per rollout` (target <= 1.5x). With `--inspect`, Inspect (`.venv-inspect`) runs
the same prompts (`mockllm/model`, `generate()`, `match()`; at most `INSPECT_SAMPLES`
of them) and `bytes on disk per rollout vs Inspect's .eval log bytes per sample`
compares the output folder's allocated bytes with the `.eval` log's (target <= 1x).
`--same-runner` measures recording alone: `proctor run` (one runner, `RecordedRollouts`)
on the same rows with `--output-dir` and with `--no-record`, each at `SAME_RUNNER_SIZES`,
and prints the marginal CPU per rollout of each (the difference between the two sizes
over the rollouts between them: interpreter start and imports cancel out) and their
ratio. `--profile N` runs one batch of N under cProfile (main thread) and prints the top 25
functions by own time.

Budgets (the batch issue): at least 500 rollouts/s at 10,000 on 2 cores with everything
recorded (Inspect writes 41 samples/s and Harbor 9.6 trials/s on this class of
machine), peak RSS under 200 MB at 10,000 (the larger sizes print theirs: what grows
with the batch is the plan's assignment table and the taskset's rows, loaded before the
first rollout; recording keeps nothing per rollout), under 8,000 bytes allocated per
rollout, and a flat
per-rollout cost: CPU ms/rollout at the largest size at most 1.5x the smallest's. The
load average is printed with the table: this machine's 2 cores may be shared.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import resource
import shutil
import subprocess
import sys
import tempfile
import textwrap
import time
from collections.abc import Callable, Coroutine
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
BUDGET_RATE = 500.0
BUDGET_RATE_AT = 10_000
BUDGET_RSS_MB = 200
BUDGET_ALLOCATED = 8000
BUDGET_FLAT = 1.5
BUDGET_RECORDED = 1.5
INSPECT_SAMPLES = 500
SAME_RUNNER_SIZES = (1000, 5000)

TASKS = """
import os

from agent import solve as agent
from env import bench, echo
from proctor import Taskset

__all__ = ["agent", "bench", "tasks"]

tasks = Taskset("bench", [echo(text=f"hello {i}") for i in range(int(os.environ["BENCH_N"]))])
"""
INSPECT_PYTHON = ROOT / ".venv-inspect" / "bin" / "python"

INSPECT = """
import glob, os, sys
from inspect_ai import Task, eval as inspect_eval
from inspect_ai.dataset import Sample
from inspect_ai.scorer import match
from inspect_ai.solver import generate

n, logs = int(sys.argv[1]), sys.argv[2]
samples = [Sample(input=f"hello {i}", target=f"hello {i}") for i in range(n)]
task = Task(dataset=samples, solver=generate(), scorer=match())
inspect_eval(task, model="mockllm/model", log_dir=logs, display="none", max_connections=64)
(log,) = glob.glob(os.path.join(logs, "*.eval"))
st = os.stat(log)
print(st.st_size, st.st_blocks * 512)
"""

ENV = '''
"""A trivial environment: echo the row's text back for a reward of 1.0."""

from proctor import Environment

bench = Environment("bench-echo", version="1.0.0")


@bench.template
async def echo(text: str):
    answer = yield text
    yield 1.0 if answer == text else 0.0
'''

AGENT = '''
"""A scripted agent: answers every prompt with the prompt itself."""

from proctor.agents import agent_from_fn

solve = agent_from_fn(str)
'''


# -- the workspace ----------------------------------------------------------------------


def workspace(root: Path, n: int, concurrency: int) -> Path:
    """Write the environment, N rows, the agent and the config under `root`."""
    root.mkdir(parents=True)
    (root / "env.py").write_text(textwrap.dedent(ENV).lstrip())
    (root / "agent.py").write_text(textwrap.dedent(AGENT).lstrip())
    with open(root / "tasks.jsonl", "w") as f:
        for i in range(n):
            row = {"env": "bench-echo", "id": "echo", "args": {"text": f"hello {i}"}}
            f.write(json.dumps({**row, "slug": f"echo-{i:06d}"}) + "\n")
    config = {
        "name": "bench",
        "taskset": {"source": "tasks.jsonl", "env_source": "env.py"},
        "agents": [{"kind": "python", "agent": "agent.py:solve"}],
        "runtime": {"kind": "local", "trusted": True},
        "max_concurrency": concurrency,
        "expected_rollouts": n,
    }
    (root / "batch.json").write_text(json.dumps(config, indent=2))
    return root


# -- one row, in its own interpreter ----------------------------------------------------


def _usage() -> tuple[float, float, float]:
    """(CPU seconds user + system, of which system, peak RSS MB) of this process so far."""
    ru = resource.getrusage(resource.RUSAGE_SELF)
    return ru.ru_utime + ru.ru_stime, ru.ru_stime, ru.ru_maxrss / 1024


def _since(t0: float, usage0: tuple[float, float, float]) -> dict[str, float]:
    """Wall, CPU and system seconds since `t0`/`usage0`, and the peak RSS."""
    wall, (cpu, sys_s, rss) = time.perf_counter() - t0, _usage()
    return {"wall_s": wall, "cpu_s": cpu - usage0[0], "sys_s": sys_s - usage0[1], "rss_mb": rss}


def run_batch(ws: Path, out: Path) -> dict[str, Any]:
    """`execute` the workspace's config into `out`; its timings and result."""
    from proctor.batch import execute

    usage0, t0 = _usage(), time.perf_counter()
    result = execute(ws / "batch.json", out)
    figures = _since(t0, usage0)
    if not result.launched:
        raise SystemExit(f"the batch did not launch:\n{result.to_json()}")
    return {**figures, "loop_s": result.wall_s}


def _asyncio_runner() -> Callable[[Coroutine[Any, Any, Any]], Any]:
    """uvloop.run when installed, as `execute` itself does; else asyncio.run."""
    try:
        import uvloop
    except ImportError:
        return asyncio.run
    return uvloop.run


def run_baseline(ws: Path, concurrency: int) -> dict[str, Any]:
    """The same rollouts through `engine.run_taskset`, nothing recorded."""
    from proctor._loader import load_agent
    from proctor.engine import run_taskset
    from proctor.runtimes import LocalRuntime
    from proctor.tasks import Taskset

    async def main() -> tuple[int, float]:
        tasks = Taskset.from_file(ws / "tasks.jsonl")
        agent: Any = load_agent(f"{ws / 'agent.py'}:solve", str(ws / "tasks.jsonl"))
        t1 = time.perf_counter()
        async with LocalRuntime(str(ws / "env.py")) as runtime:
            job = await run_taskset(tasks, agent, runtime=runtime, max_concurrent=concurrency)
        ok = sum(1 for r in job.runs if r.status == "completed" and r.reward == 1.0)
        return ok, time.perf_counter() - t1

    usage0, t0 = _usage(), time.perf_counter()
    ok, loop = _asyncio_runner()(main())
    return {**_since(t0, usage0), "loop_s": loop, "ok": ok}


def profile_batch(ws: Path, out: Path, top: int = 25) -> str:
    """`execute` under cProfile; the top functions by own time, with their share."""
    import cProfile
    import pstats

    from proctor.batch import execute

    prof = cProfile.Profile()
    prof.runcall(execute, ws / "batch.json", out)
    stats = pstats.Stats(prof)
    raw: dict[Any, Any] = stats.stats  # type: ignore[attr-defined]
    total = sum(tt for _cc, _nc, tt, _ct, _callers in raw.values())
    rows = sorted(raw.items(), key=lambda kv: kv[1][2], reverse=True)[:top]
    lines = [f"main thread: {total:.2f} s of own time; top {top} by own time", ""]
    lines.append(f"{'share':>6} {'own s':>7} {'cum s':>7} {'calls':>9}  function")
    for (file, line, name), (_cc, nc, tt, ct, _callers) in rows:
        where = _short(file)
        lines.append(f"{tt / total:>6.1%} {tt:>7.2f} {ct:>7.2f} {nc:>9,}  {where}:{line}:{name}")
    return "\n".join(lines)


def _short(file: str) -> str:
    for marker in ("/src/proctor/", "/site-packages/", "/lib/python3"):
        if marker in file:
            return file.split(marker, 1)[1]
    return file


# -- after a row ------------------------------------------------------------------------


def disk(root: Path) -> tuple[int, int, dict[str, int]]:
    """(apparent bytes, allocated bytes, allocated bytes by top-level entry) under root."""
    apparent = allocated = 0
    by_part: dict[str, int] = {}
    for folder, dirs, files in os.walk(root):
        for name in [*dirs, *files, *([] if folder != str(root) else ["."])]:
            st = os.lstat(os.path.join(folder, name))
            apparent += st.st_size
            allocated += st.st_blocks * 512
            rel = os.path.relpath(os.path.join(folder, name), root).split(os.sep)[0]
            part = "index.sqlite" if rel.startswith("index.sqlite") else rel
            by_part[part] = by_part.get(part, 0) + st.st_blocks * 512
    return apparent, allocated, by_part


def check_output(out: Path, n: int) -> dict[str, Any]:
    """Every rollout completed with reward 1.0; ms per rollout of the first/last tenth."""
    from proctor.batch import count_rollouts, list_rollouts

    counts = count_rollouts(out, by="status")
    rows = list_rollouts(out, order_by="ended_at", limit=None)
    rewarded = sum(1 for r in rows if r["reward"] == 1.0)
    ends = [r["ended_at"] for r in rows]
    tenth = max(1, n // 10)
    first = (ends[tenth - 1] - ends[0]) / max(1, tenth - 1) * 1e3
    last = (ends[-1] - ends[-tenth]) / max(1, tenth - 1) * 1e3
    apparent, allocated, by_part = disk(out)
    return {
        "counts": counts,
        "ok": counts.get("completed", 0) == n and rewarded == n,
        "first_tenth_ms": first,
        "last_tenth_ms": last,
        "apparent_per_rollout": apparent / n,
        "allocated_per_rollout": allocated / n,
        "allocated_by_part": {k: v / n for k, v in sorted(by_part.items())},
    }


# -- the driver -------------------------------------------------------------------------


def _child(args: argparse.Namespace) -> None:
    ws = Path(args.ws)
    if args.mode == "profile":
        print(profile_batch(ws, ws / "out"))
        return
    if args.mode == "batch":
        result = run_batch(ws, ws / "out")
    else:
        result = run_baseline(ws, args.concurrency)
    Path(args.result).write_text(json.dumps(result))


def row(n: int, mode: str, args: argparse.Namespace) -> dict[str, Any]:
    """Run one size in a fresh interpreter; its figures (and the output's, for a batch)."""
    parent = Path(tempfile.mkdtemp(prefix=f"bench-batch-{mode}-{n}-", dir=args.dir))
    try:
        ws = workspace(parent / "ws", n, args.concurrency)
        result = parent / "result.json"
        cmd = [sys.executable, __file__, "--row", str(n), "--mode", mode, "--ws", str(ws)]
        cmd += ["--result", str(result), "--concurrency", str(args.concurrency)]
        env = {**os.environ, "PYTHONPATH": str(ROOT / "src")}
        subprocess.run(cmd, check=True, env=env)
        if mode == "profile":
            return {}
        figures: dict[str, Any] = {"n": n, "mode": mode, **json.loads(result.read_text())}
        if mode == "batch":
            figures |= check_output(ws / "out", n)
        else:
            figures["ok"] = figures["ok"] == n
        return figures
    finally:
        if args.keep:
            print(f"kept {parent}", file=sys.stderr)
        else:
            shutil.rmtree(parent, ignore_errors=True)


def _line(r: dict[str, Any]) -> str:
    n = r["n"]
    disk_cols = f"{'-':>10} {'-':>10} {'-':>11}"
    if r["mode"] == "batch":
        disk_cols = (
            f"{r['allocated_per_rollout']:>10,.0f} {r['apparent_per_rollout']:>10,.0f} "
            f"{r['first_tenth_ms']:>5.2f}/{r['last_tenth_ms']:<5.2f}"
        )
    return (
        f"{n:>8,} {r['mode']:>8} {r['wall_s']:>7.1f} {n / r['wall_s']:>10,.0f} "
        f"{n / r['loop_s']:>8,.0f} {r['cpu_s'] / n * 1e3:>8.3f} {r['sys_s'] / r['cpu_s']:>5.0%} "
        f"{r['rss_mb']:>7.0f} "
        f"{disk_cols} {'yes' if r['ok'] else 'NO':>4}"
    )


def table(rows: list[dict[str, Any]]) -> list[str]:
    """The figures, one line per size and mode."""
    head = (
        f"{'rollouts':>8} {'mode':>8} {'wall s':>7} {'rollouts/s':>10} {'in loop':>8} "
        f"{'CPU ms/r':>8} {'sys':>5} {'RSS MB':>7} {'alloc B/r':>10} {'appar. B/r':>10} "
        f"{'1st/last 10%':>11} {'all ok':>4}"
    )
    lines = [head, "-" * len(head), *(_line(r) for r in rows)]
    batches = [r for r in rows if r["mode"] == "batch"]
    if batches:
        parts = ", ".join(f"{k} {v:,.0f}" for k, v in batches[-1]["allocated_by_part"].items())
        lines.append(f"allocated B/rollout by part at {batches[-1]['n']:,}: {parts}")
    return lines


def verdicts(rows: list[dict[str, Any]]) -> list[str]:
    """One line per budget, on the batch rows."""
    batches = {r["n"]: r for r in rows if r["mode"] == "batch"}
    if not batches:
        return []
    at = batches.get(BUDGET_RATE_AT) or batches[max(batches)]
    rate = at["n"] / at["wall_s"]
    rss = at["rss_mb"]
    alloc = max(r["allocated_per_rollout"] for r in batches.values())
    lo, hi = batches[min(batches)], batches[max(batches)]
    ratio = (hi["cpu_s"] / hi["n"]) / (lo["cpu_s"] / lo["n"])
    lines = [
        _verdict(rate >= BUDGET_RATE, f"rate {rate:,.0f}/s at {at['n']:,} (>= {BUDGET_RATE:.0f})"),
        _verdict(rss < BUDGET_RSS_MB, f"peak RSS {rss:.0f} MB at {at['n']:,} (< {BUDGET_RSS_MB})"),
        _verdict(alloc < BUDGET_ALLOCATED, f"{alloc:,.0f} B/rollout (< {BUDGET_ALLOCATED:,})"),
        _verdict(all(r["ok"] for r in batches.values()), "every rollout completed with reward 1.0"),
    ]
    if len(batches) > 1:
        flat = f"CPU/rollout {hi['n']:,} vs {lo['n']:,}: {ratio:.2f}x (<= {BUDGET_FLAT}x)"
        lines.append(_verdict(ratio <= BUDGET_FLAT, flat))
    return lines


def _verdict(ok: bool, what: str) -> str:
    return f"  {'ok  ' if ok else 'MISS'} {what}"


def overhead(rows: list[dict[str, Any]]) -> list[str]:
    """Recording's cost per size: batch over baseline, CPU per rollout and wall."""
    base = {r["n"]: r for r in rows if r["mode"] == "baseline"}
    lines = []
    for r in rows:
        b = base.get(r["n"])
        if r["mode"] != "batch" or b is None:
            continue
        lines.append(
            f"  {r['n']:>8,}: CPU/rollout {r['cpu_s'] / b['cpu_s']:.2f}x "
            f"({(r['cpu_s'] - b['cpu_s']) / r['n'] * 1e3:+.3f} ms), "
            f"wall {r['wall_s'] / b['wall_s']:.2f}x"
        )
    return ["recording overhead (batch / baseline):", *lines] if lines else []


def run_inspect(n: int, parent: str) -> dict[str, Any] | None:
    """Inspect's `.eval` log for `n` samples of the same prompts: bytes per sample
    (apparent and allocated), or None without `.venv-inspect`."""
    if not INSPECT_PYTHON.exists():
        return None
    with tempfile.TemporaryDirectory(prefix="bench-inspect-", dir=parent) as tmp:
        cmd = [str(INSPECT_PYTHON), "-c", INSPECT, str(n), os.path.join(tmp, "logs")]
        out = subprocess.run(cmd, check=True, capture_output=True, text=True, cwd=tmp)
    apparent, allocated = (int(x) for x in out.stdout.split()[-2:])
    return {"n": n, "apparent_per_sample": apparent / n, "allocated_per_sample": allocated / n}


def ratios(rows: list[dict[str, Any]], inspect: dict[str, Any] | None) -> list[str]:
    """The issue's two ratios, per batch size: recorded over unrecorded CPU per rollout
    (the baseline row of the same size), and bytes per rollout over Inspect's per sample."""
    base = {r["n"]: r for r in rows if r["mode"] == "baseline"}
    lines = []
    for r in rows:
        if r["mode"] != "batch":
            continue
        if (b := base.get(r["n"])) is not None:
            cpu = (r["cpu_s"] / r["n"]) / (b["cpu_s"] / b["n"])
            lines.append(
                _verdict(
                    cpu <= BUDGET_RECORDED,
                    f"{r['n']:,}: recorded / unrecorded CPU per rollout {cpu:.2f}x "
                    f"(<= {BUDGET_RECORDED}x)",
                )
            )
        if inspect is not None:
            ratio = r["allocated_per_rollout"] / inspect["allocated_per_sample"]
            lines.append(
                _verdict(
                    ratio <= 1.0,
                    f"{r['n']:,}: bytes on disk per rollout vs Inspect's .eval log bytes per "
                    f"sample {ratio:.2f}x ({r['allocated_per_rollout']:,.0f} vs "
                    f"{inspect['allocated_per_sample']:,.0f} allocated; apparent "
                    f"{r['apparent_per_rollout']:,.0f} vs {inspect['apparent_per_sample']:,.0f}, "
                    f"Inspect at {inspect['n']:,} samples) (<= 1x)",
                )
            )
    return ["ratios:", *lines] if lines else []


def same_runner(args: argparse.Namespace) -> list[str]:
    """`proctor run` with and without recording: marginal CPU per rollout, and the ratio."""
    parent = Path(tempfile.mkdtemp(prefix="bench-same-runner-", dir=args.dir))
    try:
        ws = workspace(parent / "ws", 1, args.concurrency)
        (ws / "tasks.py").write_text(TASKS.lstrip())
        cpu: dict[tuple[str, int], float] = {}
        for n in SAME_RUNNER_SIZES:
            for mode in ("recorded", "unrecorded"):
                print(f"proctor run, {n:,} rollouts ({mode}) ...", file=sys.stderr, flush=True)
                out = ["--output-dir", str(parent / f"out-{n}")]
                cmd = [str(Path(sys.executable).with_name("proctor")), "run", "tasks.py"]
                cmd += ["--max-concurrent", str(args.concurrency)]
                cmd += out if mode == "recorded" else ["--no-record"]
                env = {**os.environ, "PYTHONPATH": str(ROOT / "src"), "BENCH_N": str(n)}
                before = resource.getrusage(resource.RUSAGE_CHILDREN)
                subprocess.run(cmd, check=True, cwd=ws, env=env, capture_output=True)
                after = resource.getrusage(resource.RUSAGE_CHILDREN)
                cpu[mode, n] = (after.ru_utime + after.ru_stime) - (
                    before.ru_utime + before.ru_stime
                )
    finally:
        if not args.keep:
            shutil.rmtree(parent, ignore_errors=True)
    lo, hi = SAME_RUNNER_SIZES
    per = {m: (cpu[m, hi] - cpu[m, lo]) / (hi - lo) * 1e3 for m in ("recorded", "unrecorded")}
    ratio = per["recorded"] / per["unrecorded"]
    what = (
        f"proctor run {lo:,} -> {hi:,}: recorded / unrecorded CPU per rollout {ratio:.2f}x "
        f"({per['recorded']:.3f} vs {per['unrecorded']:.3f} ms, marginal) (<= {BUDGET_RECORDED}x)"
    )
    return ["same runner:", _verdict(ratio <= BUDGET_RECORDED, what)]


def _load() -> str:
    return ", ".join(f"{x:.2f}" for x in os.getloadavg())


def main() -> None:
    """Run each size (and mode) in a fresh interpreter and print the table."""
    p = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    p.add_argument("--sizes", default="1000,10000,100000")
    p.add_argument("--baseline", action="store_true", help="also run without recording")
    p.add_argument("--inspect", action="store_true", help="compare bytes with Inspect's log")
    p.add_argument(
        "--same-runner", action="store_true", help="proctor run with and without recording"
    )
    p.add_argument("--concurrency", type=int, default=64)
    p.add_argument("--profile", type=int, metavar="N", help="profile one batch of N instead")
    p.add_argument("--dir", default=tempfile.gettempdir(), help="parent of the temp folders")
    p.add_argument("--keep", action="store_true", help="keep the workspaces and outputs")
    p.add_argument("--json", help="write every figure to this file")
    p.add_argument("--row", type=int, help=argparse.SUPPRESS)
    p.add_argument("--mode", default="batch", help=argparse.SUPPRESS)
    p.add_argument("--ws", help=argparse.SUPPRESS)
    p.add_argument("--result", help=argparse.SUPPRESS)
    args = p.parse_args()
    if args.row is not None:
        _child(args)
        return
    load0 = _load()
    if args.profile:
        row(args.profile, "profile", args)
        print(f"load average before: {load0}; after: {_load()}; cores: {os.cpu_count()}")
        return
    rows = []
    for n in (int(s) for s in args.sizes.split(",")):
        for mode in ("batch", "baseline") if args.baseline else ("batch",):
            print(f"{n:,} rollouts ({mode}) ...", file=sys.stderr, flush=True)
            rows.append(row(n, mode, args))
    inspect = None
    if args.inspect:
        n = min(INSPECT_SAMPLES, max(int(s) for s in args.sizes.split(",")))
        print(f"Inspect, {n:,} samples ...", file=sys.stderr, flush=True)
        inspect = run_inspect(n, args.dir)
    report = [*table(rows), "budgets:", *verdicts(rows), *overhead(rows), *ratios(rows, inspect)]
    if args.same_runner:
        report += same_runner(args)
    report.append(f"load average before: {load0}; after: {_load()}; cores: {os.cpu_count()}")
    print("\n".join(report))
    if args.json:
        Path(args.json).write_text(json.dumps(rows, indent=2))


if __name__ == "__main__":
    main()
