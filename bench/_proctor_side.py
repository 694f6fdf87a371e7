"""The proctor side of `bench/rollouts.py` (run under the proctor venv's python).

Sections (see `_common.main`): `inproc`, `subproc`, `warm:<loop>`, `newconn:<loop>`,
each the twin of the same section in `_hud_side.py`, and `warmpool` (proctor's
`SubprocessRuntime(warm=True)`, which has no HUD twin).
"""

from __future__ import annotations

import asyncio
import gc
import statistics
import time
from typing import Any

from _common import (
    ENVS,
    children_cpu,
    latency_ms,
    machine_cpu,
    main,
    pct,
    run_on,
    timed_loop,
)

ENV_FILE = ENVS / "proctor_env.py"


class FortyTwo:
    """The trivial agent: answer and nothing else."""

    async def __call__(self, run: Any) -> None:
        run.trace.content = "42"


def _job_summary(job: Any, n: int) -> dict[str, Any]:
    errors = [r.error for r in job.runs if r.error is not None]
    rewards = [r.reward for r in job.runs if r.reward is not None]
    return {
        "runs": len(job.runs),
        "errors": len(errors),
        "first_error": None if not errors else f"{errors[0].phase}: {errors[0].message}",
        "mean_reward": sum(rewards) / len(rewards) if rewards else None,
        "complete": len(job.runs) == n and not errors,
    }


def inproc(p: dict[str, Any]) -> dict[str, Any]:
    """Taskset.run(agent, runtime=LocalRuntime(env), max_concurrent) CPU per rollout."""
    from proctor_env import answer42, env

    from proctor import LocalRuntime, Taskset

    n, conc, reps, warmup = p["n"], p["concurrency"], p["reps"], p["warmup"]

    async def go() -> dict[str, Any]:
        agent = FortyTwo()
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
    from proctor_env import answer42

    from proctor import SubprocessRuntime, Taskset, connect

    n, conc, cold = p["n"], p["concurrency"], p["cold"]

    async def go() -> dict[str, Any]:
        runtime = SubprocessRuntime(ENV_FILE)
        to_port: list[float] = []
        to_hello: list[float] = []
        discard = p["discard"]  # spawns that only warm the page cache
        for k in range(discard + cold):
            t0 = time.perf_counter()
            async with runtime(answer42(i=k)) as endpoint:
                t1 = time.perf_counter()
                async with connect(endpoint.target, token=endpoint.token, ready_timeout=READY):
                    t2 = time.perf_counter()
            if k >= discard:
                to_port.append(t1 - t0)
                to_hello.append(t2 - t0)
        tasks = Taskset("subproc", [answer42(i=i) for i in range(n)])
        gc.collect()
        c0, w0, k0 = time.process_time(), time.perf_counter(), children_cpu()
        job = await tasks.run(FortyTwo(), runtime=runtime, max_concurrent=conc)
        wall = time.perf_counter() - w0
        return {
            "n": n,
            "concurrency": conc,
            "cold_n": cold,
            "rollouts_per_s": n / wall,
            "parent_cpu_ms": (time.process_time() - c0) / n * 1e3,
            "child_cpu_ms": (children_cpu() - k0) / n * 1e3,
            "cold_port_p50_ms": pct(to_port, 0.5) * 1e3,
            "cold_port_max_ms": max(to_port) * 1e3,
            "cold_hello_p50_ms": pct(to_hello, 0.5) * 1e3,
            **_job_summary(job, n),
        }

    return run_on(p["variant"], go)


def warmpool(p: dict[str, Any]) -> dict[str, Any]:
    """SubprocessRuntime(warm=True), entered once: zygote start, fork latency, throughput.

    In order, on one runtime: the `async with runtime:` enter (spawn the zygote, import
    proctor, load the source, READY); `discard + seq` sequential rollout substrates,
    each timed from entering `runtime(task)` to the Endpoint (fork -> port announced)
    and to the answered hello; then `n` rollouts through Taskset.run; then the exit.
    """
    from proctor_env import answer42

    from proctor import SubprocessRuntime, Taskset, connect

    n, conc, seq, discard = p["n"], p["concurrency"], p["seq"], p["discard"]

    async def go() -> dict[str, Any]:
        runtime = SubprocessRuntime(ENV_FILE, warm=True)
        t0 = time.perf_counter()
        async with runtime:
            zygote_s = time.perf_counter() - t0
            to_port: list[float] = []
            to_hello: list[float] = []
            first: list[float] = []
            for k in range(discard + seq):
                t0 = time.perf_counter()
                async with runtime(answer42(i=k)) as endpoint:
                    t1 = time.perf_counter()
                    async with connect(endpoint.target, token=endpoint.token, ready_timeout=READY):
                        t2 = time.perf_counter()
                (first if k < discard else to_port).append(t1 - t0)
                if k >= discard:
                    to_hello.append(t2 - t0)
            tasks = Taskset("warmpool", [answer42(i=i) for i in range(n)])
            gc.collect()
            c0, w0, m0 = time.process_time(), time.perf_counter(), machine_cpu()
            job = await tasks.run(FortyTwo(), runtime=runtime, max_concurrent=conc)
            wall = time.perf_counter() - w0
            parent_cpu, machine = time.process_time() - c0, machine_cpu() - m0
            t3 = time.perf_counter()
        port, hello = latency_ms(to_port), latency_ms(to_hello)
        return {
            "n": n,
            "concurrency": conc,
            "zygote_start_ms": zygote_s * 1e3,
            "zygote_stop_ms": (time.perf_counter() - t3) * 1e3,
            "first_fork_ms": [x * 1e3 for x in first],
            "seq_n": seq,
            "port_p50_ms": port["p50_ms"],
            "port_p99_ms": port["p99_ms"],
            "port": port,
            "hello_p50_ms": hello["p50_ms"],
            "hello_p99_ms": hello["p99_ms"],
            "hello": hello,
            "rollouts_per_s": n / wall,
            "parent_cpu_ms": parent_cpu / n * 1e3,
            "machine_cpu_ms": machine / n * 1e3,
            **_job_summary(job, n),
        }

    return run_on(p["variant"], go)


READY = 5.0  # connect's ready_timeout: a refused hello fails fast, not after 30 s


async def _served() -> tuple[Any, str]:
    from proctor_env import env

    from proctor import EnvServer

    await env.start()
    server = EnvServer(env)
    host, port = await server.listen("127.0.0.1", 0)
    return server, f"tcp://{host}:{port}"


async def _unserve(server: Any) -> None:
    await asyncio.sleep(0.01)  # let the server hear the last client's EOF
    await server.aclose()
    await server.env.stop()


def _tcp_workaround() -> str | None:
    """Make proctor's TCP server accept this loop's transports; say what was patched.

    `proctor.channel._server._Connection.connection_made` asserts
    `isinstance(transport, asyncio.Transport)`, which uvloop's `TCPTransport` is not
    (it does not subclass asyncio's transport classes), so under uvloop every TCP
    connection is dropped before its first frame and `connect` retries until its
    ready timeout. Checked statically (a probe connection would change the process
    state the latency sections measure); when the assert is there and the running
    loop's transports would fail it, the bench swaps in the same method without it
    and the table marks the numbers.
    """
    import inspect

    from proctor.channel import _server

    loop = asyncio.get_running_loop()
    if type(loop).__module__.split(".")[0] != "uvloop":
        return None
    import uvloop.loop

    source = inspect.getsource(_server._Connection.connection_made)
    if "isinstance(transport, asyncio.Transport)" not in source or issubclass(
        uvloop.loop.TCPTransport, asyncio.Transport
    ):
        return None

    def connection_made(self: Any, transport: Any) -> None:
        self.transport = transport
        self.server._connections.add(self)

    _server._Connection.connection_made = connection_made  # type: ignore[method-assign]
    return (
        "proctor's TCP server drops every uvloop connection: channel/_server.py "
        "_Connection.connection_made asserts isinstance(transport, asyncio.Transport), "
        "which uvloop's TCPTransport is not; measured with that assert bypassed by the bench"
    )


async def _round_trips(client: Any, p: dict[str, Any]) -> dict[str, Any]:
    async def once() -> None:
        await client.start_task("answer42", {"i": 1})
        result = await client.grade("42")
        assert result["score"] == 1.0, result

    samples, cpu = await timed_loop(once, p["iters"], p["warmup"])
    return {**latency_ms(samples), "cpu_ms": cpu / len(samples) * 1e3}


def warm(p: dict[str, Any]) -> dict[str, Any]:
    """start+grade round trips on one long-lived loopback TCP connection.

    Measured on the process's first connection, then again on a second one.
    """
    from proctor import connect

    async def go() -> dict[str, Any]:
        patched = _tcp_workaround()
        server, url = await _served()
        try:
            async with connect(url, ready_timeout=READY) as client:
                out = await _round_trips(client, p)
            async with connect(url, ready_timeout=READY) as client:
                out["second"] = await _round_trips(client, p)
        finally:
            await _unserve(server)
        return {**out, "patched": patched}

    return run_on(p["variant"], go)


def newconn(p: dict[str, Any]) -> dict[str, Any]:
    """connect + hello + start + grade + close, per iteration, to a running server."""
    from proctor import connect

    async def go() -> dict[str, Any]:
        patched = _tcp_workaround()
        server, url = await _served()
        try:

            async def once() -> None:
                async with connect(url, ready_timeout=READY) as client:
                    await client.start_task("answer42", {"i": 1})
                    result = await client.grade("42")
                    assert result["score"] == 1.0, result

            samples, cpu = await timed_loop(once, p["iters"], p["warmup"])
        finally:
            await _unserve(server)
        return {**latency_ms(samples), "cpu_ms": cpu / len(samples) * 1e3, "patched": patched}

    return run_on(p["variant"], go)


if __name__ == "__main__":
    sections = {"inproc": inproc, "subproc": subproc, "warmpool": warmpool}
    main({**sections, "warm": warm, "newconn": newconn}, "proctor")
