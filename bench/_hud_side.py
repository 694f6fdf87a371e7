"""The HUD side of `bench/rollouts.py` (run under the peers python, hud==0.6.21).

Twin of `_proctor_side.py`, section for section. `rollouts.py` starts it with a
scrubbed environment; the same settings are enforced again here before `hud` is
imported, so running this file by hand cannot reach the network or the real HOME.
"""

from __future__ import annotations

import os
import sys

for _var in ("HUD_API_KEY",):
    os.environ.pop(_var, None)
os.environ["HUD_TELEMETRY_ENABLED"] = "false"
os.environ["HUD_CLI_ANALYTICS_ENABLED"] = "false"
os.environ["HUD_SKIP_VERSION_CHECK"] = "1"
for _var in (
    "HUD_TELEMETRY_URL",
    "HUD_API_URL",
    "HUD_WEB_URL",
    "HUD_GATEWAY_URL",
    "HUD_RUNTIME_URL",
    "HUD_RL_URL",
):
    os.environ[_var] = "http://127.0.0.1:9"
if not os.environ.get("PROCTOR_BENCH_SCRUBBED"):
    sys.exit("run me through bench/rollouts.py (it sets a private HOME and span dir)")

import asyncio  # noqa: E402
import gc  # noqa: E402
import statistics  # noqa: E402
import time  # noqa: E402
from typing import Any  # noqa: E402

from _common import children_cpu, latency_ms, main, pct, run_on, timed_loop  # noqa: E402


def _agent() -> Any:
    from hud.agents.base import Agent

    class FortyTwo(Agent):  # type: ignore[misc]
        """The trivial agent: answer and nothing else."""

        async def __call__(self, run: Any) -> None:
            run.trace.content = "42"

    return FortyTwo()


def _job_summary(job: Any, n: int) -> dict[str, Any]:
    errors = list(job.errors)
    rewards = [r.reward for r in job.runs if r.reward is not None]
    first = None
    if errors:
        first = str(getattr(errors[0].trace, "error", None) or errors[0])[:300]
    return {
        "runs": len(job.runs),
        "errors": len(errors),
        "first_error": first,
        "mean_reward": sum(rewards) / len(rewards) if rewards else None,
        "complete": len(job.runs) == n and not errors,
    }


def inproc(p: dict[str, Any]) -> dict[str, Any]:
    """Taskset.run(agent, runtime=LocalRuntime(env), max_concurrent) CPU per rollout."""
    from hud import LocalRuntime, Taskset
    from hud_env import answer42, env

    n, conc, reps, warmup = p["n"], p["concurrency"], p["reps"], p["warmup"]

    async def go() -> dict[str, Any]:
        agent = _agent()
        runtime = LocalRuntime(env)
        warm = Taskset("warmup", [answer42(i=-1 - k) for k in range(warmup)])
        await warm.run(agent, runtime=runtime, max_concurrent=conc)
        cpu, wall, last = [], [], None
        for _ in range(reps):
            tasks = Taskset("inproc", [answer42(i=i) for i in range(n)])
            gc.collect()
            c0, w0 = time.process_time(), time.perf_counter()
            job = await tasks.run(agent, runtime=runtime, max_concurrent=conc)
            cpu.append((time.process_time() - c0) / n)
            wall.append((time.perf_counter() - w0) / n)
            last = _job_summary(job, n)
        return {
            "n": n,
            "reps": reps,
            "concurrency": conc,
            "cpu_ms": statistics.median(cpu) * 1e3,
            "cpu_ms_all": [c * 1e3 for c in cpu],
            "rollouts_per_s": 1 / statistics.median(wall),
            **(last or {}),
        }

    return run_on(p["variant"], go)


def subproc(p: dict[str, Any]) -> dict[str, Any]:
    """Cold spawn latency (sequential) and throughput of SubprocessRuntime."""
    import hud
    from hud import SubprocessRuntime, Taskset
    from hud_env import answer42, env

    n, conc, cold = p["n"], p["concurrency"], p["cold"]

    async def go() -> dict[str, Any]:
        runtime = SubprocessRuntime(env)
        to_port: list[float] = []
        to_hello: list[float] = []
        discard = p["discard"]  # spawns that only warm the page cache
        for k in range(discard + cold):
            t0 = time.perf_counter()
            async with runtime(answer42(i=k)) as rt:
                t1 = time.perf_counter()
                async with hud.connect(rt):
                    t2 = time.perf_counter()
            if k >= discard:
                to_port.append(t1 - t0)
                to_hello.append(t2 - t0)
        tasks = Taskset("subproc", [answer42(i=i) for i in range(n)])
        gc.collect()
        c0, w0, k0 = time.process_time(), time.perf_counter(), children_cpu()
        job = await tasks.run(_agent(), runtime=runtime, max_concurrent=conc)
        wall = time.perf_counter() - w0
        return {
            "n": n,
            "concurrency": conc,
            "cold_n": cold,
            "rollouts_per_s": n / wall,
            "parent_cpu_ms": (time.process_time() - c0) / n * 1e3,
            "child_cpu_ms": (children_cpu() - k0) / n * 1e3,
            **_cold(to_port, to_hello),
            **_job_summary(job, n),
        }

    return run_on(p["variant"], go)


def _cold(to_port: list[float], to_hello: list[float]) -> dict[str, Any]:
    """Percentiles of the sequential spawns, in ms (none when `cold` was 0)."""
    if not to_port:
        return {}
    return {
        "cold_port_p50_ms": pct(to_port, 0.5) * 1e3,
        "cold_port_max_ms": max(to_port) * 1e3,
        "cold_hello_p50_ms": pct(to_hello, 0.5) * 1e3,
        "cold_hello_p90_ms": pct(to_hello, 0.9) * 1e3,
    }


async def _served() -> tuple[Any, str]:
    from hud.environment.server import bind
    from hud_env import env

    await env.start()
    server = await bind(env, "127.0.0.1", 0)
    host, port = server.sockets[0].getsockname()[:2]
    return server, f"tcp://{host}:{port}"


async def _unserve(server: Any) -> None:
    from hud.environment.server import _shutdown
    from hud_env import env

    await asyncio.sleep(0.01)  # let the server hear the last client's EOF
    await _shutdown(server)
    await env.stop()


async def _round_trips(client: Any, p: dict[str, Any]) -> dict[str, Any]:
    async def once() -> None:
        await client.start_task("answer42", {"i": 1})
        result = await client.grade({"answer": "42"})
        assert result["score"] == 1.0, result

    samples, cpu = await timed_loop(once, p["iters"], p["warmup"])
    return {**latency_ms(samples), "cpu_ms": cpu / len(samples) * 1e3}


def warm(p: dict[str, Any]) -> dict[str, Any]:
    """start+grade round trips on one long-lived loopback TCP connection.

    Measured on the process's first connection, then again on a second one.
    """
    import hud
    from hud.eval import Runtime

    async def go() -> dict[str, Any]:
        server, url = await _served()
        try:
            async with hud.connect(Runtime(url)) as client:
                out = await _round_trips(client, p)
            async with hud.connect(Runtime(url)) as client:
                out["second"] = await _round_trips(client, p)
        finally:
            await _unserve(server)
        return out

    return run_on(p["variant"], go)


def newconn(p: dict[str, Any]) -> dict[str, Any]:
    """connect + hello + start + grade + close, per iteration, to a running server."""
    import hud
    from hud.eval import Runtime

    async def go() -> dict[str, Any]:
        server, url = await _served()
        runtime = Runtime(url)
        try:

            async def once() -> None:
                async with hud.connect(runtime) as client:
                    await client.start_task("answer42", {"i": 1})
                    result = await client.grade({"answer": "42"})
                    assert result["score"] == 1.0, result

            samples, cpu = await timed_loop(once, p["iters"], p["warmup"])
        finally:
            await _unserve(server)
        return {**latency_ms(samples), "cpu_ms": cpu / len(samples) * 1e3}

    return run_on(p["variant"], go)


if __name__ == "__main__":
    main({"inproc": inproc, "subproc": subproc, "warm": warm, "newconn": newconn}, "hud")
