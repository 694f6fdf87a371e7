"""ContainerRuntime figures for the substrate budgets (issue: container <= 600 ms
start-to-ready):

    .venv/bin/python bench/_container_probe.py [--quick] [--engine podman] [--json PATH]

Builds (or finds) the `python_image` of this interpreter, then drives
`bench/envs/proctor_env.py` (one trivial template, mounted read-only) with a trivial
agent, for each network mode: "none" (Unix socket in a mounted folder) and "bridge"
(port published on 127.0.0.1, token). Per mode:

- start-to-ready: sequential rollouts' container up to a served `hello` (entering the
  provider, then `connect` + `hello`), p50 and p90; and the part of it spent before
  the endpoint was yielded (the engine and the server's start);
- teardown: leaving the provider (SIGTERM, shutdown hooks, container removed), p50;
- rollouts/s: `run_taskset` of N rows at max_concurrent 8 and 32, wall clock;
- peak RSS: the largest VmHWM of a rollout's server process (PID 1 of its container).

Run on an otherwise idle machine; progress to stderr, the table to stdout.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import os
import shutil
import statistics
import sys
import time
from pathlib import Path
from typing import Any

from proctor import Task
from proctor.agents import agent_from_fn
from proctor.channel import connect
from proctor.engine import run_taskset
from proctor.runtimes._container import ContainerRuntime, Engine
from proctor.runtimes._image import python_image

ENVS = Path(__file__).resolve().parent / "envs"
SOURCE = ENVS / "proctor_env.py"
TASK = Task(env="bench", id="answer42")
AGENT = agent_from_fn(lambda prompt: "42")
RUNC = shutil.which("runc")  # crun fails on these hosts' cgroups


def _pct(samples: list[float], q: float) -> float:
    ordered = sorted(samples)
    return ordered[max(0, round(q * len(ordered)) - 1)]


async def _server_hwm_kb(runtime: ContainerRuntime) -> int:
    """VmHWM of PID 1 of each of this runtime's running containers, the largest."""
    exe = [shutil.which(runtime.engine_name) or runtime.engine_name]
    ps = await asyncio.create_subprocess_exec(
        *exe, "ps", "-q", f"--filter=label=proctor.batch={runtime.batch}",
        stdout=asyncio.subprocess.PIPE,
    )  # fmt: skip
    ids = (await ps.communicate())[0].decode().split()
    peak = 0
    for cid in ids:
        inspect = await asyncio.create_subprocess_exec(
            *exe, "inspect", "--format", "{{.State.Pid}}", cid, stdout=asyncio.subprocess.PIPE
        )
        peak = max(peak, _hwm_kb((await inspect.communicate())[0].decode().strip()))
    return peak


def _hwm_kb(pid: str) -> int:
    with contextlib.suppress(OSError, StopIteration, ValueError):
        status = Path(f"/proc/{pid}/status").read_text().splitlines()
        return int(next(ln for ln in status if ln.startswith("VmHWM:")).split()[1])
    return 0


async def start_to_ready(runtime: ContainerRuntime, n: int) -> dict[str, Any]:
    ready, endpoint_at, teardown, peak = [], [], [], 0
    for _ in range(n):
        t0 = time.perf_counter()
        async with contextlib.AsyncExitStack() as stack:
            endpoint = await stack.enter_async_context(runtime(TASK))
            endpoint_at.append(time.perf_counter() - t0)
            async with connect(endpoint.target, token=endpoint.token) as client:
                ready.append(time.perf_counter() - t0)
                assert client.manifest is not None
            peak = max(peak, await _server_hwm_kb(runtime))
            t1 = time.perf_counter()
        teardown.append(time.perf_counter() - t1)
    return {
        "ready_p50_ms": statistics.median(ready) * 1e3,
        "ready_p90_ms": _pct(ready, 0.9) * 1e3,
        "endpoint_p50_ms": statistics.median(endpoint_at) * 1e3,
        "teardown_p50_ms": statistics.median(teardown) * 1e3,
        "rollout_hwm_kb": peak,
    }


async def throughput(runtime: ContainerRuntime, n: int, concurrency: int) -> dict[str, Any]:
    t0 = time.perf_counter()
    job = await run_taskset([TASK] * n, AGENT, runtime=runtime, max_concurrent=concurrency)
    elapsed = time.perf_counter() - t0
    graded = sum(run.reward == 1.0 for run in job.runs)
    errors = [run.error for run in job.runs if run.error is not None][:3]
    return {"n": n, "graded": graded, "seconds": elapsed, "per_s": n / elapsed, "errors": errors}


async def mode(engine: Engine, image: str, network: str, quick: bool) -> dict[str, Any]:
    seq, rows = (5, 16) if quick else (20, 64)
    print(f"{network}: {seq} sequential, then {rows} rows at 8 and 32", file=sys.stderr)
    options: dict[str, Any] = {"engine": engine}
    if engine == "podman" and RUNC is not None:
        options["oci_runtime"] = RUNC
    runtime = ContainerRuntime(
        image, str(SOURCE), network=network, mounts=[f"{ENVS}:{ENVS}:ro"], **options
    )
    async with runtime:
        await start_to_ready(runtime, 2)  # warm the page cache and the engine
        seq_figures = await start_to_ready(runtime, seq)
        at8 = await throughput(runtime, rows, 8)
        at32 = await throughput(runtime, rows, 32)
    return {"mode": network, **seq_figures, "at8": at8, "at32": at32}


async def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("--engine", default=None, choices=["podman", "docker"])
    parser.add_argument("--json", type=Path, default=None)
    args = parser.parse_args()
    t0 = time.perf_counter()
    image = python_image(engine=args.engine)
    print(f"image {image} ready in {time.perf_counter() - t0:.1f}s", file=sys.stderr)
    engine = ContainerRuntime(engine=args.engine).engine_name
    results = [
        await mode(engine, image, network, args.quick)  # type: ignore[arg-type]
        for network in ("none", "bridge")
    ]
    print(f"ContainerRuntime ({engine}) on {os.cpu_count()} cores; budget 600 ms start-to-ready")
    print(
        f"{'network':<8} {'ready p50':>10} {'p90':>8} {'endpoint':>9} {'teardown':>9} "
        f"{'roll/s @8':>10} {'@32':>6} {'server RSS':>11}"
    )
    for r in results:
        print(
            f"{r['mode']:<8} {r['ready_p50_ms']:>8.0f}ms {r['ready_p90_ms']:>6.0f}ms "
            f"{r['endpoint_p50_ms']:>7.0f}ms {r['teardown_p50_ms']:>7.0f}ms "
            f"{r['at8']['per_s']:>10.1f} {r['at32']['per_s']:>6.1f} "
            f"{r['rollout_hwm_kb'] / 1024:>9.1f}MB"
        )
        for key in ("at8", "at32"):
            if r[key]["graded"] != r[key]["n"]:
                print(f"  {key}: only {r[key]['graded']}/{r[key]['n']} graded: {r[key]['errors']}")
    if args.json:
        args.json.write_text(json.dumps(results, indent=2, default=str))


if __name__ == "__main__":
    asyncio.run(main())
