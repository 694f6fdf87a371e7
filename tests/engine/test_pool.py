"""The engine's one pool (`for_each`) and the spec a pool runs (`RunSpec`)."""

from __future__ import annotations

import asyncio

import pytest

from proctor import Task
from proctor.agents import agent_from_fn
from proctor.engine import Planned, RunSpec, default_runtime, for_each


async def test_for_each_keeps_its_bound_and_its_order() -> None:
    inside, peak, began = 0, 0, []

    async def work(i: int) -> None:
        nonlocal inside, peak
        began.append(i)
        inside += 1
        peak = max(peak, inside)
        for _ in range(3):  # the others get their turn while this one is in
            await asyncio.sleep(0)
        inside -= 1

    await for_each(range(10), work, max_concurrent=3)
    assert peak == 3 and began == list(range(10))
    await for_each(range(5), work, max_concurrent=None)
    assert peak == 5  # no bound: every item at once


async def test_for_each_stops_taking_items_once_told() -> None:
    done: list[int] = []

    async def work(i: int) -> None:
        done.append(i)

    await for_each(range(10), work, max_concurrent=1, stop=lambda: len(done) >= 4)
    assert done == [0, 1, 2, 3]
    with pytest.raises(ValueError, match="max_concurrent must be >= 1"):
        await for_each([1], work, max_concurrent=0)


def test_a_spec_names_only_agents_it_has() -> None:
    row, here = Task(env="e", id="t"), default_runtime()
    agents = {"a": agent_from_fn(lambda prompt: prompt)}
    spec = RunSpec([Planned(row, "g", "a")] * 4, agents, here, "job", max_concurrent=3)
    assert spec.width == 3
    assert RunSpec([Planned(row, "g", "a")], agents, here, "job").width == 1
    with pytest.raises(ValueError, match=r"agents the spec does not have: \['b'\]"):
        RunSpec([Planned(row, "g", "b")], agents, here, "job")
    with pytest.raises(ValueError, match="max_concurrent must be >= 1"):
        RunSpec([], {}, here, "job", max_concurrent=0)
