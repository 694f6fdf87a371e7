"""What grading and export cost: rewards, metrics, group rewards, a command grader, and
`samples_from_batch` -> `write_samples`, each against a baseline measured in the same run.

    .venv/bin/python bench/grading.py [--rollouts 2000] [--rounds 3] [--reps 2]
        [--command-rollouts 300] [--sizes 1000,10000] [--seed 100] [--skip SECTION]
        [--dir PARENT] [--keep] [--json PATH]

Every row runs in a fresh interpreter, so its CPU and peak RSS are its own.

1. Grading, in process: `Taskset.run(agent, runtime=LocalRuntime(env), max_concurrent=50)`
   with a function agent answering "42". Each interpreter runs one case: a warm-up run,
   then `--reps` timed runs of `--rollouts` rollouts; the cases take turns for `--rounds`
   rounds (so a change of load hits them all), and each figure is the median over every
   timed run. The baseline template yields `graders.exact(answer, "42")` as its grade;
   the others end at their first yield and are graded by two `@template.reward`s
   (`exact`, `terse`) and one `@env.metric`: all sync, all async, and sync plus
   `env.group_reward(weight=0.0)(pass_at_k(2))` with `group=4` (a quarter of the rows,
   four rollouts each). `graders.command("true")` yields the grade of a subprocess
   (`bash -c true`) per rollout; its row counts the reaped children's CPU too and runs
   `--command-rollouts` rollouts. Every rollout must complete with reward 1.0 (and,
   with the group reward, a pass@2 of 1.0): the `all ok` column.
2. Export: a real batch (`proctor.batch.execute`: a `ToolAgent` on `FakeModelServer` asked
   for vLLM token ids and logprobs, 3 tool calls and an answer, so 4 model turns per
   rollout; local runtime; `repeats = 4`, rewards 1 and 0 within a group) of `--seed`
   rollouts, copied to each size through `BatchStore` and `RolloutRecorder` (each seed
   rollout's record fields, model turns, trace and checkpoint written again under a new
   task slug: the layout the batch writes, without rerunning the model). Then, per size,
   in a fresh interpreter each: the baseline (`read`) lists the index a page (500) at a
   time and reads every rollout with `read_rollout` (record, model turns, trace); `jsonl`
   and `parquet` stream `samples_from_batch(out)` into `write_samples`, their imports
   done before the clock. Figures: wall, rollouts/s, samples/s, whether every sample has
   token ids, CPU ms per rollout, CPU and wall over the baseline's, MB read and written,
   and peak RSS (ru_maxrss) of the interpreter, which should stay flat from size to size.

Only 127.0.0.1 is used (the fake model). The load average before and after, each row's,
and the number of cores are printed with the tables.
"""

from __future__ import annotations

import argparse
import asyncio
import dataclasses
import gc
import importlib
import itertools
import json
import os
import resource
import shutil
import statistics
import subprocess
import sys
import tempfile
import textwrap
import time
from collections.abc import AsyncGenerator, Callable, Iterator
from pathlib import Path
from typing import Any, Literal

CONCURRENCY = 50
PAGE = 500
CASES = ("baseline", "sync", "async", "group", "command")
CASE_TITLES = {
    "baseline": "yield graders.exact (baseline)",
    "sync": "2 rewards + metric, sync",
    "async": "2 rewards + metric, async",
    "group": "sync + pass_at_k, group=4",
    "command": 'yield graders.command("true")',
}
EXPORT_MODES = ("read", "jsonl", "parquet")

# -- 1. grading, in process -------------------------------------------------------------


def _env_baseline() -> Any:
    """Baseline: the grade is the template's second yield."""
    from proctor import Environment
    from proctor.env import graders

    env = Environment("grading-baseline")

    @env.template
    async def answer42(i: int = 0) -> AsyncGenerator[str | float, str]:
        answer = yield f"#{i}: reply with 42"
        yield graders.exact(answer, "42")

    return env, answer42


def exact(answer: str) -> float:
    from proctor.env import graders

    return graders.exact(answer, "42")


def terse(answer: str) -> bool:
    return len(answer) < 5


def answer_length(answer: str) -> int:
    return len(answer)


async def exact_async(answer: str) -> float:
    return exact(answer)


async def terse_async(answer: str) -> bool:
    return terse(answer)


async def answer_length_async(answer: str) -> int:
    return answer_length(answer)


def _env_rewards(kind: str) -> Any:
    """Two template rewards and an environment metric, sync or async; with `group`,
    also a pass@2 group reward."""
    from proctor import Environment
    from proctor.env import group_rewards

    env = Environment(f"grading-{kind}")

    @env.template
    async def answer42(i: int = 0) -> AsyncGenerator[str, str]:
        yield f"#{i}: reply with 42"

    sync = kind != "async"
    answer42.reward(name="exact")(exact if sync else exact_async)
    answer42.reward(name="terse")(terse if sync else terse_async)
    env.metric(name="answer_length")(answer_length if sync else answer_length_async)
    if kind == "group":
        env.group_reward(weight=0.0)(group_rewards.pass_at_k(2))
    return env, answer42


def _env_command() -> Any:
    """A subprocess per grade: `graders.command("true")` as the second yield."""
    from proctor import Environment
    from proctor.env import graders

    env = Environment("grading-command")

    @env.template
    async def answer42(i: int = 0) -> AsyncGenerator[str | float, str]:
        yield f"#{i}: reply with 42"
        yield await graders.command("true")

    return env, answer42


def _usage() -> tuple[float, float, float]:
    """(own CPU s, reaped children's CPU s, peak RSS MB) of this process so far."""
    me = resource.getrusage(resource.RUSAGE_SELF)
    kids = resource.getrusage(resource.RUSAGE_CHILDREN)
    return me.ru_utime + me.ru_stime, kids.ru_utime + kids.ru_stime, me.ru_maxrss / 1024


def _all_ok(job: Any, case: str) -> bool:
    """Every run completed with reward 1.0 (and pass@2 1.0 in the group case)."""
    for run in job.runs:
        if run.status != "completed" or run.reward != 1.0 or run.evaluation_failed:
            return False
        if case == "group" and run.group_rewards.get("pass_at_2") != 1.0:
            return False
    return True


def grading_row(case: str, n: int, reps: int) -> dict[str, Any]:
    """Run `case` `reps` times over `n` rollouts after a warm-up; per-rollout figures."""
    from proctor import LocalRuntime, Taskset
    from proctor.agents import agent_from_fn

    makers: dict[str, Callable[[], Any]] = {
        "baseline": _env_baseline,
        "command": _env_command,
    }
    env, template = makers.get(case, lambda: _env_rewards(case))()
    group = 4 if case == "group" else 1
    agent = agent_from_fn(lambda _prompt: "42")

    async def main() -> dict[str, Any]:
        runtime = LocalRuntime(env)
        rows = n // group
        warm = Taskset("warm", [template(i=-1 - k) for k in range(max(20, rows // 10))])
        await warm.run(agent, runtime=runtime, group=group, max_concurrent=CONCURRENCY)
        cpu, kids, wall, ok = [], [], [], True
        for _ in range(reps):
            tasks = Taskset("grading", [template(i=i) for i in range(rows)])
            gc.collect()
            (c0, k0, _), w0 = _usage(), time.perf_counter()
            job = await tasks.run(agent, runtime=runtime, group=group, max_concurrent=CONCURRENCY)
            (c1, k1, _), w1 = _usage(), time.perf_counter()
            count = len(job.runs)
            cpu.append((c1 - c0) / count)
            kids.append((k1 - k0) / count)
            wall.append((w1 - w0) / count)
            ok = ok and count == rows * group and _all_ok(job, case)
        return {"rollouts": rows * group, "cpu": cpu, "kids": kids, "wall": wall, "ok": ok}

    return asyncio.run(main())


# -- 2. export: the seed batch ----------------------------------------------------------

SEED_ENV = '''
"""Take three notes with the note tool, then answer done."""

from proctor import Environment

env = Environment("bench-notes")


@env.template
async def notes(i: int):
    answer = yield f"#{i}: take 3 notes with the note tool, then answer done."
    yield 1.0 if str(answer).strip() == "done" else 0.0
'''

SEED_AGENT = '''
"""A ToolAgent with one tool, asking the server for vLLM token ids and logprobs."""

from proctor.agents import ToolAgent


def note(text: str) -> str:
    """Keep a note."""
    return f"noted {len(text)} characters"


class Noter(ToolAgent):
    def __init__(self) -> None:
        super().__init__(
            "openai/gpt-4.1-mini",
            tools=[note],
            params={"logprobs": True, "return_token_ids": True},
        )
'''

MODEL = "gpt-4.1-mini"  # priced, so the plan passes
FILLER = "lorem ipsum dolor sit amet " * 6
NOTES = 3


def _policy() -> Callable[[Any], Any]:
    """The fake model: `NOTES` note calls, then "done" and "nope" by turns."""
    from proctor.testing import Reply

    answers = itertools.cycle(["done", "nope"])

    def policy(request: Any) -> Any:
        if sum(1 for m in request.messages if m.get("role") == "tool") < NOTES:
            return Reply.tool("note", text=FILLER)
        return Reply(text=next(answers))

    return policy


def build_seed(ws: Path, rollouts: int) -> dict[str, Any]:
    """Execute a real batch of `rollouts` (4 repeats per task) into `ws/seed`."""
    from proctor.batch import aexecute
    from proctor.testing import FakeModelServer

    ws.mkdir(parents=True, exist_ok=True)
    (ws / "env.py").write_text(textwrap.dedent(SEED_ENV).lstrip())
    (ws / "agents.py").write_text(textwrap.dedent(SEED_AGENT).lstrip())
    tasks = max(1, rollouts // 4)
    with open(ws / "tasks.jsonl", "w") as f:
        for i in range(tasks):
            row = {"env": "bench-notes", "id": "notes", "args": {"i": i}}
            f.write(json.dumps({**row, "slug": f"notes-{i:06d}"}) + "\n")

    async def main() -> dict[str, Any]:
        async with FakeModelServer(_policy(), models=(MODEL,), record=False) as fake:
            agent = {
                "kind": "python",
                "agent": "agents.py:Noter",
                "model": f"openai/{MODEL}@{fake.url}",
            }
            config = {
                "name": "grading-bench",
                "taskset": {"source": "tasks.jsonl", "env_source": "env.py"},
                "agents": [agent],
                "runtime": {"kind": "local", "trusted": True},
                "repeats": 4,
                "max_concurrent": 32,
                "expected_rollouts": tasks * 4,
            }
            (ws / "batch.json").write_text(json.dumps(config))
            t0 = time.perf_counter()
            result = await aexecute(ws / "batch.json", ws / "seed")
            return {"exit_code": result.exit_code, "wall_s": time.perf_counter() - t0}

    os.environ.pop("OPENAI_API_KEY", None)  # the fake takes none; never send a real one
    got = asyncio.run(main())
    if got["exit_code"] != 0:
        raise SystemExit(f"the seed batch failed (exit {got['exit_code']})")
    return {**got, "rollouts": tasks * 4}


# -- 2. export: replicating the seed through the store ----------------------------------


@dataclasses.dataclass(frozen=True)
class Planned:
    """A `PlannedRollout`: what `BatchStore.add_assignments` and `begin` take."""

    rollout_id: str
    task: str
    agent: str | None
    model: str | None
    repeat: int


_KEPT_BY_BEGIN = ("id", "task", "agent", "model", "repeat", "attempt", "status")


def _seed_rollouts(seed: Path) -> list[dict[str, Any]]:
    """Every seed rollout as `read_rollout` gives it, in plan order."""
    from proctor.batch import list_rollouts, read_rollout

    return [read_rollout(seed, row["id"]) for row in list_rollouts(seed, limit=None)]


def replicate(seed: Path, out: Path, n: int) -> dict[str, Any]:
    """Write `n` rollouts into a new directory `out`, copying the seed's round robin."""
    from proctor.batch import BatchStore, read_batch, rollout_id

    seeds = _seed_rollouts(seed)
    doc = {k: v for k, v in read_batch(seed).items() if k not in ("layout_version", "created_at")}
    t0 = time.perf_counter()
    with BatchStore.create(out, doc) as store:
        plan = list(_plan(seeds, n, rollout_id))
        store.add_assignments(plan)
        for planned, src in zip(plan, itertools.cycle(seeds), strict=False):
            _copy(store, planned, src)
    return {"rollouts": n, "wall_s": time.perf_counter() - t0}


def _plan(seeds: list[dict[str, Any]], n: int, make_id: Callable[..., str]) -> Iterator[Planned]:
    """`n` assignments: seed rollout k % len(seeds) under task `<slug>-c<copy>`."""
    for k, src in zip(range(n), itertools.cycle(seeds), strict=False):
        rec = src["record"]
        task = f"{rec['task']}-c{k // len(seeds)}"
        rid = make_id(task, rec["agent"], rec["repeat"])
        yield Planned(rid, task, rec["agent"], rec["model"], rec["repeat"])


def _copy(store: Any, planned: Planned, src: dict[str, Any]) -> None:
    """Record one rollout as the runner does, with the seed rollout's contents."""
    rec = store.begin(planned, started_at=src["record"]["started_at"])
    for turn in src["model_turns"]:
        rec.append_turn(turn)
    for step in src["trace"]:
        rec.append_step(step)
    if src["checkpoint"] is not None:
        rec.save_checkpoint(src["checkpoint"])
    fields = {k: v for k, v in src["record"].items() if k not in _KEPT_BY_BEGIN}
    rec.finish(src["record"]["status"], **fields)


# -- 2. export: one mode over one directory ---------------------------------------------


def export_row(out: Path, mode: str, dest: Path) -> dict[str, Any]:
    """Read (`read`) or export (`jsonl`, `parquet`) the batch at `out`; the figures."""
    from proctor.batch import count_rollouts

    rollouts = sum(count_rollouts(out).values())
    _preload(mode)
    (c0, _, rss0), w0 = _usage(), time.perf_counter()
    samples = with_ids = 0
    if mode == "read":
        _read_all(out)
    else:
        from proctor.samples import samples_from_batch, write_samples

        fmt: Literal["jsonl", "parquet"] = "jsonl" if mode == "jsonl" else "parquet"
        counts = write_samples(samples_from_batch(out), dest, fmt)
        samples, with_ids = counts.samples, counts.with_tokens
    (c1, _, rss), w1 = _usage(), time.perf_counter()
    return {
        "mode": mode,
        "rollouts": rollouts,
        "wall_s": w1 - w0,
        "cpu_ms": (c1 - c0) / rollouts * 1e3,
        "samples": samples,
        "with_ids": with_ids,
        "mb_out": dest.stat().st_size / 1e6 if mode != "read" else 0.0,
        "mb_in": _tree_bytes(out) / 1e6,
        "rss_mb": rss,
        "rss0_mb": rss0,
    }


def _preload(mode: str) -> None:
    """Import what the mode uses before the clock starts (pyarrow alone takes ~0.5 s)."""
    if mode != "read":
        import proctor.samples  # noqa: F401
    if mode == "parquet":
        importlib.import_module("pyarrow.parquet")


def _read_all(out: Path) -> int:
    """The baseline: every index row a page at a time, every rollout with `read_rollout`."""
    from proctor.batch import list_rollouts, read_rollout

    turns = 0
    for offset in itertools.count(0, PAGE):
        rows = list_rollouts(out, limit=PAGE, offset=offset)
        for row in rows:
            turns += len(read_rollout(out, row["id"])["model_turns"])
        if len(rows) < PAGE:
            return turns
    raise AssertionError("unreachable")


def _tree_bytes(root: Path) -> int:
    return sum(os.lstat(os.path.join(d, f)).st_size for d, _, fs in os.walk(root) for f in fs)


# -- the driver -------------------------------------------------------------------------


def _child(args: argparse.Namespace) -> None:
    """One row, in this fresh interpreter; its figures go to `--result`."""
    kind, _, what = args.row.partition(":")
    ws = Path(args.ws)
    if kind == "grading":
        result = grading_row(what, args.n, args.reps)
    elif kind == "seed":
        result = build_seed(ws, args.n)
    elif kind == "replicate":
        result = replicate(ws / "seed", ws / f"out-{args.n}", args.n)
    else:
        result = export_row(ws / f"out-{args.n}", what, ws / f"samples-{args.n}.{what}")
    Path(args.result).write_text(json.dumps(result))


def run_child(row: str, n: int, args: argparse.Namespace, ws: Path) -> dict[str, Any]:
    """Run one row in a fresh interpreter and return its figures."""
    print(f"{row} {n:,} ...", file=sys.stderr, flush=True)
    result, load = ws / "result.json", os.getloadavg()[0]
    argv = [sys.executable, __file__, "--row", row, "--n", str(n), "--reps", str(args.reps)]
    subprocess.run([*argv, "--ws", str(ws), "--result", str(result)], check=True)
    got: dict[str, Any] = json.loads(result.read_text())
    result.unlink()
    return {**got, "load": load}


def grading_table(rows: list[dict[str, Any]]) -> list[str]:
    base = rows[0]
    head = f"{'case':<30} {'rollouts':>8} {'CPU ms/r':>9} {'x base':>7} {'child ms/r':>10} "
    lines = [head + f"{'rollouts/s':>10} {'x base':>7} {'all ok':>6} {'load':>5}", "-" * 102]
    for r in rows:
        cpu = r["cpu_ms"] + r["child_cpu_ms"]
        lines.append(
            f"{CASE_TITLES[r['case']]:<30} {r['rollouts']:>8,} {r['cpu_ms']:>9.3f} "
            f"{cpu / base['cpu_ms']:>6.2f}x {r['child_cpu_ms']:>10.3f} "
            f"{r['rollouts_per_s']:>10,.0f} {r['rollouts_per_s'] / base['rollouts_per_s']:>6.3f}x "
            f"{'yes' if r['ok'] else 'NO':>6} {r['load']:>5.2f}"
        )
    return lines


def export_table(rows: list[dict[str, Any]]) -> list[str]:
    head = f"{'rollouts':>8} {'mode':<8} {'wall s':>7} {'rollouts/s':>10} {'samples':>8} "
    head += f"{'samples/s':>9} {'ids':>4} {'CPU ms/r':>8} {'x read':>7} {'wall x':>7} {'MB in':>7} "
    head += f"{'MB out':>7} {'RSS MB':>6} {'before':>6} {'load':>5}"
    lines = [head, "-" * len(head)]
    for r in rows:
        base = next(b for b in rows if b["mode"] == "read" and b["rollouts"] == r["rollouts"])
        sps = f"{r['samples'] / r['wall_s']:>9,.0f}" if r["samples"] else f"{'-':>9}"
        out = f"{r['mb_out']:.2f}" if r["mode"] != "read" else "-"
        ids = "-" if not r["samples"] else "all" if r["with_ids"] == r["samples"] else "SOME"
        lines.append(
            f"{r['rollouts']:>8,} {r['mode']:<8} {r['wall_s']:>7.2f} "
            f"{r['rollouts'] / r['wall_s']:>10,.0f} {r['samples']:>8,} {sps} {ids:>4} "
            f"{r['cpu_ms']:>8.3f} {r['cpu_ms'] / base['cpu_ms']:>6.2f}x "
            f"{r['wall_s'] / base['wall_s']:>6.2f}x {r['mb_in']:>7.1f} "
            f"{out:>7} {r['rss_mb']:>6.0f} {r['rss0_mb']:>6.0f} {r['load']:>5.2f}"
        )
    return lines


def rss_growth(rows: list[dict[str, Any]]) -> list[str]:
    """Peak RSS of the largest size over the smallest's, per mode."""
    sizes = sorted({r["rollouts"] for r in rows})
    if len(sizes) < 2:
        return []
    by = {(r["mode"], r["rollouts"]): r["rss_mb"] for r in rows}
    parts = [f"{m} {by[m, sizes[-1]] / by[m, sizes[0]]:.2f}x" for m in EXPORT_MODES]
    return [f"peak RSS at {sizes[-1]:,} over {sizes[0]:,}: " + ", ".join(parts)]


GRADING_NOTE = [
    "CPU ms/r: this interpreter's user + system CPU per rollout; child ms/r: its reaped",
    "children's (the command grader's bash); x base: (CPU + child) over the baseline's CPU;",
    "rollouts/s: wall over the same runs; load: median 1-minute load average as its rounds began.",
]
EXPORT_NOTE = [
    "read: the baseline, list_rollouts a page at a time and read_rollout of each; x read",
    "and wall x: CPU and wall over the read row of the same size (CPU is the steadier on a",
    "shared machine); RSS MB: peak of the row's interpreter, before: its peak before the clock",
    "(imports: pyarrow's for parquet). Parquet's MB out is small because the copies repeat",
    "the seed's rollouts, which its dictionary encoding and compression fold.",
]


def _load() -> str:
    return ", ".join(f"{x:.2f}" for x in os.getloadavg())


def parse() -> argparse.Namespace:
    p = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    p.add_argument("--rollouts", type=int, default=2000, help="rollouts per grading run")
    p.add_argument("--rounds", type=int, default=3, help="interleaved rounds of the cases")
    p.add_argument("--reps", type=int, default=2, help="timed runs per case and round")
    p.add_argument("--command-rollouts", type=int, default=300)
    p.add_argument("--sizes", default="1000,10000", help="rollouts per exported batch")
    p.add_argument("--seed", type=int, default=100, help="rollouts of the real seed batch")
    p.add_argument("--skip", choices=["grading", "export"], help="leave one section out")
    p.add_argument("--dir", default=tempfile.gettempdir(), help="parent of the temp folder")
    p.add_argument("--keep", action="store_true", help="keep the batches and exports")
    p.add_argument("--json", help="write every figure to this file")
    for hidden in ("--row", "--ws", "--result"):
        p.add_argument(hidden, help=argparse.SUPPRESS)
    p.add_argument("--n", type=int, help=argparse.SUPPRESS)
    return p.parse_args()


def grading_section(args: argparse.Namespace, ws: Path) -> tuple[list[str], dict[str, Any]]:
    """Every grading case, each in a fresh interpreter: the report lines and figures."""
    sizes = {c: args.command_rollouts if c == "command" else args.rollouts for c in CASES}
    runs: dict[str, list[dict[str, Any]]] = {c: [] for c in CASES}
    for _ in range(args.rounds):  # interleaved, so a change of load hits every case
        for case in CASES:
            runs[case].append(run_child(f"grading:{case}", sizes[case], args, ws))
    rows = [_medians(case, got) for case, got in runs.items()]
    title = (
        f"grading per rollout (Taskset.run, LocalRuntime, function agent, max_concurrent "
        f"{CONCURRENCY}; median of {args.rounds} interleaved rounds x {args.reps} runs, "
        "each interpreter warmed up first):"
    )
    return [title, *grading_table(rows), *GRADING_NOTE, ""], {"grading": rows}


def _medians(case: str, got: list[dict[str, Any]]) -> dict[str, Any]:
    """One case's row: the medians over every timed run of every round."""

    def median(key: str) -> float:
        values: list[float] = [x for g in got for x in g[key]]
        return statistics.median(values)

    return {
        "case": case,
        "rollouts": got[0]["rollouts"],
        "cpu_ms": median("cpu") * 1e3,
        "child_cpu_ms": median("kids") * 1e3,
        "rollouts_per_s": 1 / median("wall"),
        "ok": all(g["ok"] for g in got),
        "load": statistics.median(g["load"] for g in got),
    }


def export_section(args: argparse.Namespace, ws: Path) -> tuple[list[str], dict[str, Any]]:
    """The seed batch, then per size its copy and every export mode: lines and figures."""
    seed = run_child("seed", args.seed, args, ws)
    copies, rows = [], []
    for n in (int(s) for s in args.sizes.split(",")):
        copies.append(run_child("replicate", n, args, ws))
        os.sync()  # the copy's writeback must not land in the rows timed next
        rows += [run_child(f"export:{mode}", n, args, ws) for mode in EXPORT_MODES]
    rates = ", ".join(f"{c['rollouts'] / c['wall_s']:,.0f}/s ({c['rollouts']:,})" for c in copies)
    title = (
        f"export (seed: a real batch of {seed['rollouts']} ToolAgent rollouts, 4 model turns "
        f"each, executed in {seed['wall_s']:.1f} s = {seed['rollouts'] / seed['wall_s']:.0f} "
        f"rollouts/s; copied through BatchStore at {rates}):"
    )
    lines = [title, *export_table(rows), *rss_growth(rows), *EXPORT_NOTE, ""]
    return lines, {"seed": seed, "replicate": copies, "export": rows}


def main() -> None:
    """Run each row in a fresh interpreter and print the tables."""
    args = parse()
    if args.row is not None:
        _child(args)
        return
    load0, report, figures = _load(), [], {}
    ws = Path(tempfile.mkdtemp(prefix="proctor-bench-grading-", dir=args.dir))
    try:
        for name, section in (("grading", grading_section), ("export", export_section)):
            if args.skip != name:
                lines, got = section(args, ws)
                report += lines
                figures.update(got)
    finally:
        if args.keep:
            print(f"kept {ws}", file=sys.stderr)
        else:
            shutil.rmtree(ws, ignore_errors=True)
    report.append(f"load average before: {load0}; after: {_load()}; cores: {os.cpu_count()}")
    print("\n".join(report))
    if args.json:
        Path(args.json).write_text(json.dumps(figures, indent=2))


if __name__ == "__main__":
    main()
