"""The batch store alone: synthetic trivial rollouts into a full output directory.

    .venv/bin/python bench/batch_store.py [--sizes 1000,10000,100000]
        [--durability default|strict] [--dir PARENT] [--keep] [--json PATH]

Each size runs in a fresh interpreter (`--row N --out FILE`), so its peak RSS is its
own. A row creates a new output directory, records N assignments (`plan`), then for
each one does what the executor does for a trivial scripted rollout: `begin`, then
`finish` with the record such a rollout produces (a prompt, the task's setup step, one
answer step, the grade, timings), and finally `close` (index committed, final
`batch-state.json`, filesystem synced). Figures per row:

- rollouts/s: N over the wall time from the first `begin` to the end of `close`, and
  `in loop` without `close` (whose final snapshot, sync and WAL checkpoint are a
  fixed cost that weighs on small batches);
- CPU us/rollout: process CPU (the flush thread included) over the same span, and
  the wall time per rollout of the first and the last tenth (flat means no growth);
- RSS: peak resident set (ru_maxrss) of the row's interpreter;
- bytes/rollout: every file and folder of the output directory after `close`, as
  apparent size (st_size) and as allocated blocks (st_blocks * 512), over N.

The store alone should leave most of the batch path's 2 ms/rollout (500 rollouts/s) to
the engine: its budget here is 3,000 rollouts/s, with under 8,000 bytes allocated per
rollout, under 200 MB RSS, and the same per-rollout cost at every size. The load
average is printed with the table: this machine's 2 cores may be shared.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import shutil
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
BUDGET_RATE = 3000.0
BUDGET_ALLOCATED = 8000
BUDGET_RSS_MB = 200


@dataclass(frozen=True, slots=True)
class Assignment:
    """The fields of a planned rollout the store reads (`proctor.store.PlannedRollout`)."""

    rollout_id: str
    task: str
    agent: str | None
    model: str | None
    repeat: int


def _record(i: int, started: float) -> dict[str, Any]:
    """What `Run.to_dict()` holds for a trivial scripted rollout, less the task dump."""
    now = time.time()
    grade = {"reward": 1.0, "subscores": [], "info": {}, "content": None, "is_error": False}
    return {
        "phase": "done",
        "reward": 1.0,
        "prompt": f"Reply with the word hello ({i})",
        "result": {"grade": grade},
        "trace": {
            "id": f"{i:032x}",
            "content": "hello",
            "steps": [
                {
                    "kind": "task",
                    "content": None,
                    "data": {"phase": "setup"},
                    "start": started,
                    "end": now,
                },
                {
                    "kind": "user",
                    "content": f"Reply with the word hello ({i})",
                    "start": now,
                    "end": now,
                },
                {"kind": "assistant", "content": "hello", "start": now, "end": now},
                {
                    "kind": "task",
                    "content": grade,
                    "data": {"phase": "evaluate"},
                    "start": now,
                    "end": now,
                },
            ],
        },
        "usage": {},
        "stop_reason": "answered",
    }


def _disk(root: Path) -> tuple[int, int, dict[str, int]]:
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


def run_row(n: int, durability: str, parent: str, keep: bool) -> dict[str, Any]:
    """Record `n` trivial rollouts into a new output directory; return its figures."""
    from proctor.store import BatchStore

    out = Path(tempfile.mkdtemp(prefix="batch-store-", dir=parent)) / "out"
    assignments = (
        Assignment(f"task-{i:06d}.scripted.r0", f"task-{i:06d}", "scripted", None, 0)
        for i in range(n)
    )
    t0 = time.perf_counter()
    store = BatchStore.create(
        out, {"config": {"bench": "batch_store", "n": n}}, durability=durability
    )  # type: ignore[arg-type]
    store.add_assignments(assignments)
    plan_s = time.perf_counter() - t0
    tenth = max(1, n // 10)
    marks: list[float] = []
    cpu0, t1 = time.process_time(), time.perf_counter()
    for i in range(n):
        if i % tenth == 0:
            marks.append(time.perf_counter())
        a = Assignment(f"task-{i:06d}.scripted.r0", f"task-{i:06d}", "scripted", None, 0)
        rec = store.begin(a)
        rec.finish("completed", **_record(i, time.time()))
    marks.append(time.perf_counter())
    loop = marks[-1] - t1
    store.close()
    wall, cpu = time.perf_counter() - t1, time.process_time() - cpu0
    apparent, allocated, by_part = _disk(out)
    if not keep:
        shutil.rmtree(out.parent)
    return {
        "n": n,
        "durability": durability,
        "plan_s": plan_s,
        "wall_s": wall,
        "rate": n / wall,
        "loop_rate": n / loop,
        "close_s": wall - loop,
        "cpu_us": cpu / n * 1e6,
        "first_tenth_us": (marks[1] - marks[0]) / tenth * 1e6,
        "last_tenth_us": (marks[-1] - marks[-2]) / (n - tenth * (len(marks) - 2)) * 1e6,
        "rss_mb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024,
        "apparent_per_rollout": apparent / n,
        "allocated_per_rollout": allocated / n,
        "allocated_by_part": {k: v / n for k, v in sorted(by_part.items())},
        "out": str(out) if keep else None,
    }


def _table(rows: list[dict[str, Any]], load: tuple[tuple[float, ...], tuple[float, ...]]) -> str:
    head = (
        f"{'rollouts':>9} {'mode':>8} {'rollouts/s':>11} {'in loop':>8} {'CPU us/r':>9} "
        f"{'first/last 10% us/r':>20} {'RSS MB':>7} {'apparent B/r':>13} {'allocated B/r':>14}"
        "  budgets"
    )
    lines = [head, "-" * len(head)]
    for r in rows:
        ok = [
            "rate ok" if r["rate"] >= BUDGET_RATE else f"rate < {BUDGET_RATE:.0f}",
            "disk ok" if r["allocated_per_rollout"] < BUDGET_ALLOCATED else "disk over",
            "rss ok" if r["rss_mb"] < BUDGET_RSS_MB else "rss over",
        ]
        lines.append(
            f"{r['n']:>9,} {r['durability']:>8} {r['rate']:>11,.0f} {r['loop_rate']:>8,.0f} "
            f"{r['cpu_us']:>9.0f} "
            f"{r['first_tenth_us']:>9.0f} / {r['last_tenth_us']:<8.0f} {r['rss_mb']:>7.0f} "
            f"{r['apparent_per_rollout']:>13,.0f} {r['allocated_per_rollout']:>14,.0f}"
            f"  {', '.join(ok)}"
        )
    parts = ", ".join(f"{k} {v:,.0f}" for k, v in rows[-1]["allocated_by_part"].items())
    lines.append(f"allocated B/rollout by part at {rows[-1]['n']:,}: {parts}")
    lines.append(
        "load average before: "
        + ", ".join(f"{x:.2f}" for x in load[0])
        + "; after: "
        + ", ".join(f"{x:.2f}" for x in load[1])
        + f"; cores: {os.cpu_count()}"
    )
    return "\n".join(lines)


def main() -> None:
    """Run each size in a fresh interpreter and print the table."""
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--sizes", default="1000,10000,100000")
    p.add_argument("--durability", default="default", choices=("default", "strict"))
    p.add_argument("--dir", default=tempfile.gettempdir(), help="parent of the output directories")
    p.add_argument("--keep", action="store_true", help="keep the output directories")
    p.add_argument("--json", help="write every figure to this file")
    p.add_argument("--row", type=int, help=argparse.SUPPRESS)
    p.add_argument("--out", help=argparse.SUPPRESS)
    args = p.parse_args()
    if args.row is not None:
        result = run_row(args.row, args.durability, args.dir, args.keep)
        Path(args.out).write_text(json.dumps(result))
        return
    rows = []
    load0 = os.getloadavg()
    for n in (int(s) for s in args.sizes.split(",")):
        print(f"{n:,} rollouts ({args.durability}) ...", file=sys.stderr, flush=True)
        with tempfile.NamedTemporaryFile(suffix=".json") as f:
            cmd = [
                sys.executable,
                __file__,
                "--row",
                str(n),
                "--out",
                f.name,
                "--durability",
                args.durability,
            ]
            cmd += ["--dir", args.dir, *(["--keep"] if args.keep else [])]
            subprocess.run(cmd, check=True, env={**os.environ, "PYTHONPATH": str(ROOT / "src")})
            rows.append(json.loads(Path(f.name).read_text()))
    print(_table(rows, (load0, os.getloadavg())))
    if args.json:
        Path(args.json).write_text(json.dumps(rows, indent=2))


if __name__ == "__main__":
    main()
