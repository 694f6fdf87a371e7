"""The normal path of an in-process rollout leaves no reference cycles behind.

A cycle outlives its last reference until the cycle collector runs, which costs a
quarter of the CPU of a long batch; each test runs rollouts with automatic collection
off and asserts that a full collection afterwards finds nothing.
"""

from __future__ import annotations

import asyncio
import gc
from collections.abc import AsyncGenerator, Iterator

import pytest

from proctor import Environment, Taskset
from proctor.agents import Run
from proctor.engine import rollout
from proctor.runtimes import LocalRuntime

env = Environment("engine-cycles")


@env.template
async def answer42(i: int = 0) -> AsyncGenerator[str | float, str]:
    answer = yield f"#{i}: reply with 42"
    yield 1.0 if answer == "42" else 0.0


async def forty_two(run: Run) -> None:
    run.trace.content = "42"


@pytest.fixture
def collector_off() -> Iterator[None]:
    gc.collect()
    gc.disable()
    try:
        yield
    finally:
        gc.enable()


def cyclic_after(make: object) -> int:
    """Objects a full collection frees once what `make` returned is dropped."""
    del make
    return gc.collect()


def test_a_thousand_rollouts_leave_no_cyclic_garbage(collector_off: None) -> None:
    async def go() -> int:
        runtime = LocalRuntime(env)
        warm = Taskset("warm", [answer42(i=-1)])
        await warm.run(forty_two, runtime=runtime)  # first-use caches are not garbage
        gc.collect()
        job = await Taskset("t", [answer42(i=i) for i in range(1000)]).run(
            forty_two, runtime=runtime, max_concurrent=50
        )
        assert len(job.runs) == 1000
        assert all(r.error is None and r.reward == 1.0 for r in job.runs)
        return cyclic_after(job)

    assert asyncio.run(go()) == 0


def test_a_single_rollout_leaves_no_cyclic_garbage(collector_off: None) -> None:
    async def go() -> int:
        runtime = LocalRuntime(env)
        async with runtime:
            await rollout(answer42(i=-1), forty_two, runtime=runtime)
            gc.collect()
            for i in range(20):
                run = await rollout(answer42(i=i), forty_two, runtime=runtime, timeout=60)
                assert run.error is None and run.reward == 1.0
            del run
        return gc.collect()

    assert asyncio.run(go()) == 0
