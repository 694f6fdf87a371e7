"""This working tree beside a named earlier commit, measured in one run, interleaved.

    .venv/bin/python bench/versus.py --commit 41c5b05 [--what rollouts] [--repeats 7]

`git archive`s the commit's `src/` into a temporary folder, then runs the same
measurement in fresh interpreters with `PYTHONPATH` pointing at each side in turn (the
order alternates per repeat, so drift in the machine's load falls on both sides). It
prints each side's median, the paired ratio (this tree over the commit, per repeat) as a
median with its range, and the load average before and after. Ratios are what to read
on a busy machine; absolute figures move with the load.

`--what rollouts`: CPU per trivial in-process rollout (`Taskset.run` with `LocalRuntime`,
`bench/envs/proctor_env.py`, 50 at once) and the objects the cycle collector finds per
rollout with automatic collection off. `--what floor` measures `bench/floor.py`'s bare
loop the same way (a control: its ratio should read 1.00x).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tarfile
import tempfile
from pathlib import Path
from typing import Any

BENCH = Path(__file__).resolve().parent
ROOT = BENCH.parent

_ROLLOUTS = """\
import asyncio, gc, json, sys, time
sys.path.insert(0, {envs!r})
from proctor_env import answer42, env
from proctor import LocalRuntime, Taskset

class FortyTwo:
    async def __call__(self, run):
        run.trace.content = "42"

async def go(n, conc):
    agent, runtime = FortyTwo(), LocalRuntime(env)
    await Taskset("w", [answer42(i=-1 - k) for k in range(100)]).run(
        agent, runtime=runtime, max_concurrent=conc)
    tasks = Taskset("t", [answer42(i=i) for i in range(n)])
    gc.collect()
    c0 = time.process_time()
    job = await tasks.run(agent, runtime=runtime, max_concurrent=conc)
    cpu = (time.process_time() - c0) / n
    assert len(job.runs) == n and all(r.error is None for r in job.runs), "rollouts failed"
    gc.disable()
    gc.collect()
    tasks = Taskset("c", [answer42(i=i) for i in range(n)])
    job = await tasks.run(agent, runtime=runtime, max_concurrent=conc)
    del job, tasks
    cyclic = gc.collect() / n
    gc.enable()
    return {{"cpu_ms": cpu * 1e3, "cyclic": cyclic}}

print(json.dumps(asyncio.run(go({n}, 50))))
"""

_FLOOR = """\
import json, sys
sys.path.insert(0, {bench!r})
from floor import floor_cpu
print(json.dumps({{"cpu_ms": floor_cpu({n}) * 1e3}}))
"""

WHAT = {"rollouts": _ROLLOUTS, "floor": _FLOOR}


def archive(commit: str, into: Path) -> Path:
    """The commit's src/ unpacked under `into`; its path."""
    blob = subprocess.run(
        ["git", "-C", str(ROOT), "archive", "--format=tar", commit, "src"],
        check=True,
        capture_output=True,
    ).stdout
    tar = into / "src.tar"
    tar.write_bytes(blob)
    with tarfile.open(tar) as t:
        t.extractall(into, filter="data")
    return into / "src"


def measure(src: Path, code: str) -> dict[str, Any]:
    """One fresh interpreter running `code` with `src` first on the path."""
    env = {**os.environ, "PYTHONPATH": str(src)}
    out = subprocess.run(
        [sys.executable, "-c", code], env=env, capture_output=True, text=True, cwd=ROOT
    )
    if out.returncode != 0:
        tail = out.stderr.strip().splitlines()[-1:] or ["no output"]
        raise SystemExit(f"versus: measuring {src} failed: {tail[0]}")
    return dict(json.loads(out.stdout.strip().splitlines()[-1]))


def ratio_line(label: str, ratios: list[float]) -> str:
    """A paired ratio as its median and range."""
    r = sorted(ratios)
    return f"{label}: {statistics.median(r):.2f}x (range {r[0]:.2f}-{r[-1]:.2f}, n={len(r)})"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--commit", required=True, help="the earlier commit to compare with")
    parser.add_argument("--what", choices=sorted(WHAT), default="rollouts")
    parser.add_argument("--repeats", type=int, default=7, help="interleaved pairs")
    parser.add_argument("-n", type=int, default=2000, help="rollouts per measurement")
    args = parser.parse_args()
    code = WHAT[args.what].format(envs=str(BENCH / "envs"), bench=str(BENCH), n=args.n)
    load0 = os.getloadavg()
    with tempfile.TemporaryDirectory(prefix="versus-") as tmp:
        sides = {"tree": ROOT / "src", args.commit: archive(args.commit, Path(tmp))}
        runs: list[dict[str, dict[str, Any]]] = []
        for k in range(args.repeats):
            order = list(sides) if k % 2 == 0 else list(reversed(sides))
            runs.append({name: measure(sides[name], code) for name in order})
            print(f"repeat {k + 1}/{args.repeats}: {json.dumps(runs[-1])}", file=sys.stderr)
    load1 = os.getloadavg()
    print(f"versus {args.commit}, --what {args.what}, n={args.n}, {args.repeats} repeats")
    print(f"load average {load0[0]:.2f} before, {load1[0]:.2f} after")
    for key in runs[0]["tree"]:
        for name in sides:
            med = statistics.median(r[name][key] for r in runs)
            print(f"  {key:8} {name:10} median {med:.4f}")
        pairs = [(r["tree"][key], r[args.commit][key]) for r in runs]
        if all(b > 0 for _, b in pairs):
            print("  " + ratio_line(f"{key} tree / {args.commit}", [a / b for a, b in pairs]))


if __name__ == "__main__":
    main()
