"""The floor of an in-process rollout, beside proctor's, in one run.

    .venv/bin/python bench/floor.py [-n 2000] [--repeats 5]

The floor is a bare asyncio loop driving the same two-yield generator as
`bench/envs/proctor_env.py` with the same exchange: the client sends `start` and then
`answer` as orjson frames over an in-memory pipe (a queue each way), each request
awaiting its own future; the server decodes, steps the generator and sends the prompt and
the reward back the same way. No framework: what any design of this shape must pay.

It prints the floor's CPU per rollout, proctor's (`Taskset.run` with `LocalRuntime`, 50 at
once) with the objects per rollout it leaves to the cycle collector, their ratio per
repeat (median and range) and the load average.
"""

from __future__ import annotations

import argparse
import asyncio
import gc
import os
import statistics
import sys
import time
from collections.abc import AsyncGenerator
from pathlib import Path
from typing import Any

import orjson

CONCURRENCY = 50


async def answer42(i: int = 0) -> AsyncGenerator[str | float, str]:
    """The same template body as the benchmark environment's."""
    answer = yield f"#{i}: reply with 42"
    yield 1.0 if answer == "42" else 0.0


async def _serve(inbox: asyncio.Queue[bytes], outbox: asyncio.Queue[bytes]) -> None:
    runs: dict[int, AsyncGenerator[str | float, str]] = {}
    while True:
        msg = orjson.loads(await inbox.get())
        rid = msg["id"]
        if msg["op"] == "start":
            gen = runs[rid] = answer42(msg["i"])
            out = await gen.asend(None)  # type: ignore[arg-type]
        else:
            out = await runs.pop(rid).asend(msg["answer"])
        outbox.put_nowait(orjson.dumps({"id": rid, "value": out}))


async def _receive(inbox: asyncio.Queue[bytes], waiting: dict[int, asyncio.Future[Any]]) -> None:
    while True:
        msg = orjson.loads(await inbox.get())
        waiting.pop(msg["id"]).set_result(msg["value"])


async def floor_rollouts(n: int) -> float:
    """Run `n` floor rollouts, `CONCURRENCY` at once; CPU seconds per rollout."""
    up: asyncio.Queue[bytes] = asyncio.Queue()
    down: asyncio.Queue[bytes] = asyncio.Queue()
    waiting: dict[int, asyncio.Future[Any]] = {}
    loop = asyncio.get_running_loop()
    server = asyncio.create_task(_serve(up, down))
    receiver = asyncio.create_task(_receive(down, waiting))

    async def request(msg: dict[str, Any]) -> Any:
        fut = waiting[msg["id"]] = loop.create_future()
        up.put_nowait(orjson.dumps(msg))
        return await fut

    async def rollout(i: int) -> float:
        prompt = await request({"id": i, "op": "start", "i": i})
        assert prompt.startswith("#")
        return float(await request({"id": i, "op": "answer", "answer": "42"}))

    async def batch(first: int, count: int) -> None:
        sem = asyncio.Semaphore(CONCURRENCY)

        async def one(i: int) -> float:
            async with sem:
                return await rollout(i)

        await asyncio.gather(*(one(first + k) for k in range(count)))

    await batch(-1000, 100)  # warm-up
    gc.collect()
    c0 = time.process_time()
    await batch(0, n)
    cpu = (time.process_time() - c0) / n
    server.cancel()
    receiver.cancel()
    return cpu


def floor_cpu(n: int) -> float:
    """CPU seconds per floor rollout, on a fresh loop."""
    return asyncio.run(floor_rollouts(n))


def proctor_cpu(n: int) -> tuple[float, float]:
    """CPU seconds per proctor in-process rollout (`Taskset.run`, `LocalRuntime`), and
    the objects per rollout that a second pass, with automatic collection off, leaves
    to the cycle collector."""
    sys.path.insert(0, str(Path(__file__).resolve().parent / "envs"))
    from proctor_env import answer42 as template
    from proctor_env import env

    from proctor import LocalRuntime, Taskset

    class FortyTwo:
        async def __call__(self, run: Any) -> None:
            run.trace.content = "42"

    async def go() -> tuple[float, float]:
        agent, runtime = FortyTwo(), LocalRuntime(env)
        warm = Taskset("w", [template(i=-1 - k) for k in range(100)])
        await warm.run(agent, runtime=runtime, max_concurrent=CONCURRENCY)
        tasks = Taskset("t", [template(i=i) for i in range(n)])
        gc.collect()
        c0 = time.process_time()
        await tasks.run(agent, runtime=runtime, max_concurrent=CONCURRENCY)
        cpu = (time.process_time() - c0) / n
        gc.collect()
        gc.disable()
        try:
            tasks = Taskset("c", [template(i=i) for i in range(n)])
            await tasks.run(agent, runtime=runtime, max_concurrent=CONCURRENCY)
            del tasks
            return cpu, gc.collect() / n
        finally:
            gc.enable()

    return asyncio.run(go())


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("-n", type=int, default=2000, help="rollouts per measurement")
    parser.add_argument("--repeats", type=int, default=5)
    args = parser.parse_args()
    load0 = os.getloadavg()[0]
    floors, procs, cyclic = [], [], []
    for _ in range(args.repeats):
        floors.append(floor_cpu(args.n))
        cpu, garbage = proctor_cpu(args.n)
        procs.append(cpu)
        cyclic.append(garbage)
    ratios = sorted(p / f for p, f in zip(procs, floors, strict=True))
    print(f"load average {load0:.2f} before, {os.getloadavg()[0]:.2f} after; n={args.n}")
    print(f"floor   CPU per rollout: {statistics.median(floors) * 1e3:.4f} ms")
    print(
        f"proctor CPU per rollout: {statistics.median(procs) * 1e3:.4f} ms, "
        f"{statistics.median(cyclic):.2f} cyclic objects per rollout"
    )
    print(
        f"proctor / floor: {statistics.median(ratios):.2f}x "
        f"(range {ratios[0]:.2f}-{ratios[-1]:.2f}, {args.repeats} paired repeats)"
    )


if __name__ == "__main__":
    main()
