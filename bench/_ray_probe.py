"""Ray figures for the substrates table: a throwaway two-node cluster, measured.

    .venv/bin/python bench/_ray_probe.py [--quick] [--json PATH]

Runs itself inside fresh network and pid namespaces (only `lo` up, as the tests do:
see `tests/ray/ray_cluster.py`), starts a head and a worker node of 2 CPUs each on
this machine, and drives the trivial `bench/envs/proctor_env.py` with a trivial agent:

- `RayRuntime` start-to-ready: entering the provider until the endpoint is yielded
  (actor placed, worker process up, environment loaded, port bound), sequential, p50
  and p90; and the teardown (shutdown hooks, kill, Ray's confirmation).
- rollouts/s through `RayRuntime` (an actor per rollout, agents on the driver) at
  max_concurrent 8 and 32.
- rollouts/s through `executor="ray"` (agent loops on one shard per node, each
  environment in its shard's process via `LocalRuntime`), and the same rows on the
  local executor for reference; and `executor="ray"` with `RayRuntime` combined.
- peak RSS of an environment actor's process.

Both nodes share this machine's cores, so the figures are overhead, not scale-out.
Progress goes to stderr, a table to stdout, headed by the load average before and after.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import shlex
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

BENCH = Path(__file__).resolve().parent
sys.path.insert(0, str(BENCH.parent / "tests" / "ray"))

from ray_cluster import LocalCluster, in_namespace, loopback_up  # noqa: E402

from proctor import Task  # noqa: E402
from proctor.agents import Run  # noqa: E402
from proctor.engine import run_taskset  # noqa: E402
from proctor.engine._ray_executor import RayExecutor  # noqa: E402
from proctor.runtimes import LocalRuntime  # noqa: E402
from proctor.runtimes._ray import RayRuntime  # noqa: E402

SOURCE = str(BENCH / "envs" / "proctor_env.py")
FULL = {"ready": 30, "runtime": 96, "executor": 3000, "combined": 64}
QUICK = {"ready": 8, "runtime": 24, "executor": 400, "combined": 16}


async def answer(run: Run) -> None:
    run.trace.content = "42"


def rows(n: int) -> list[Task]:
    return [Task(env="bench", id="answer42", args={"i": i}) for i in range(n)]


def say(what: str) -> None:
    print(what, file=sys.stderr, flush=True)


async def start_to_ready(runtime: RayRuntime, n: int) -> dict[str, float]:
    ready, down = [], []
    for task in rows(n + 1):
        t0 = time.perf_counter()
        async with runtime(task):
            t1 = time.perf_counter()
        ready.append(t1 - t0)
        down.append(time.perf_counter() - t1)
    ready, down = ready[1:], down[1:]  # the first also connects this process to Ray
    return {
        "ready_p50_ms": statistics.median(ready) * 1000,
        "ready_p90_ms": statistics.quantiles(ready, n=10)[-1] * 1000,
        "teardown_p50_ms": statistics.median(down) * 1000,
    }


async def throughput(n: int, **options: Any) -> dict[str, float]:
    t0 = time.perf_counter()
    job = await run_taskset(rows(n), answer, **options)
    wall = time.perf_counter() - t0
    stats = job.stats
    if stats.graded != n:
        raise RuntimeError(f"{stats.errors} of {n} rollouts failed: {stats.errors_by_phase}")
    return {"n": n, "seconds": wall, "rollouts_per_s": n / wall}


def actors_rss_mib() -> float:
    """The largest RSS (MiB) among the environment actors' processes right now."""
    peak = 0.0
    for pid in (int(p) for p in os.listdir("/proc") if p.isdigit()):
        try:
            if b"_EnvActor" not in Path(f"/proc/{pid}/cmdline").read_bytes():
                continue
            status = Path(f"/proc/{pid}/status").read_text()
        except OSError:
            continue
        kib = next(int(line.split()[1]) for line in status.splitlines() if "VmRSS" in line)
        peak = max(peak, kib / 1024)
    return peak


async def actor_rss(runtime: RayRuntime) -> float:
    """Peak RSS (MiB) of an environment actor's process, sampled while 8 serve."""
    seen: list[float] = []

    async def sample(run: Run) -> None:
        seen.append(actors_rss_mib())
        run.trace.content = "42"

    await run_taskset(rows(8), sample, runtime=runtime, max_concurrent=8)
    return max(seen)


async def probe(sizes: dict[str, int], root: Path) -> dict[str, Any]:
    out: dict[str, Any] = {}
    cluster = LocalCluster(root=root)
    try:
        t0 = time.perf_counter()
        cluster.wait_nodes()
        out["cluster_start_s"] = time.perf_counter() - t0
        runtime = RayRuntime(SOURCE)
        say("RayRuntime start-to-ready ...")
        out["ray_runtime"] = await start_to_ready(runtime, sizes["ready"])
        out["ray_runtime"]["actor_rss_mib"] = await actor_rss(runtime)
        for limit in (8, 32):
            say(f"RayRuntime rollouts at max_concurrent {limit} ...")
            out[f"ray_runtime_c{limit}"] = await throughput(
                sizes["runtime"], runtime=runtime, max_concurrent=limit
            )
        say("executor='ray' rollouts ...")
        local = LocalRuntime(SOURCE)
        ex = RayExecutor(concurrency=32)
        out["executor_ray"] = await throughput(sizes["executor"], runtime=local, executor=ex)
        out["executor_local"] = await throughput(sizes["executor"], runtime=local)
        say("executor='ray' with RayRuntime ...")
        out["executor_ray_runtime_c8"] = await throughput(
            sizes["combined"], runtime=runtime, executor=RayExecutor(concurrency=4)
        )
    finally:
        cluster.close()
    return out


def table(data: dict[str, Any]) -> str:
    rt = data["ray_runtime"]
    lines = [
        "| Ray (2 local nodes, 2 CPUs each, one machine) | figure |",
        "|---|---|",
        f"| cluster start (head + worker, both up) | {data['cluster_start_s']:.1f} s |",
        f"| RayRuntime start-to-ready p50 / p90 | {rt['ready_p50_ms']:.0f} / "
        f"{rt['ready_p90_ms']:.0f} ms |",
        f"| RayRuntime teardown p50 | {rt['teardown_p50_ms']:.0f} ms |",
        f"| RayRuntime actor peak RSS | {rt['actor_rss_mib']:.0f} MiB |",
    ]
    for key, label in (
        ("ray_runtime_c8", "RayRuntime rollouts/s, max_concurrent 8"),
        ("ray_runtime_c32", "RayRuntime rollouts/s, max_concurrent 32"),
        ("executor_ray", "executor='ray' rollouts/s (LocalRuntime in shards)"),
        ("executor_local", "local executor rollouts/s, same rows (reference)"),
        ("executor_ray_runtime_c8", "executor='ray' + RayRuntime rollouts/s, 8 in flight"),
    ):
        row = data[key]
        lines.append(
            f"| {label} | {row['rollouts_per_s']:.1f} ({row['n']} in {row['seconds']:.1f} s) |"
        )
    return "\n".join(lines)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="fewer rollouts")
    parser.add_argument("--json", type=Path, help="also write the raw figures here")
    parser.add_argument("--inside", type=Path, help=argparse.SUPPRESS)
    args = parser.parse_args()
    sizes = QUICK if args.quick else FULL
    if args.inside is not None:  # in the namespace: measure, hand the figures back
        loopback_up()
        args.inside.write_text(json.dumps(asyncio.run(probe(sizes, args.inside.parent))))
        return 0
    load0 = os.getloadavg()[0]
    with tempfile.TemporaryDirectory() as tmp:
        raw = Path(tmp, "figures.json")
        argv = [sys.executable, __file__, "--inside", str(raw), *(["--quick"] * args.quick)]
        subprocess.run(in_namespace(argv), check=True, stdout=sys.stderr)
        data = json.loads(raw.read_text())
    if args.json:
        args.json.write_text(json.dumps(data, indent=1))
    command = shlex.join(getattr(sys, "orig_argv", sys.argv))
    print(f"{command} on {os.cpu_count()} cores, load average {load0:.2f} before, "
          f"{os.getloadavg()[0]:.2f} after\n")  # fmt: skip
    print(table(data))
    return 0


if __name__ == "__main__":
    sys.exit(main())
