"""A rollout's deadlines run on one timer (`Clock`): armed once at the soonest any
phase could end, re-armed when it fires before a deadline has passed, shared with the
rollouts due within the same tick."""

from __future__ import annotations

import asyncio
import gc
import time
from collections.abc import AsyncGenerator
from typing import Any

import pytest

from proctor import Environment, LocalRuntime, Run, Task, Taskset, rollout
from proctor.engine import Timeouts, _deadline

env = Environment("clock")


@env.template
async def wait(hold: float = 0.0) -> AsyncGenerator[Any, Any]:
    await asyncio.sleep(hold)
    answer = yield "take your time"
    yield 1.0 if answer == "partial" else 0.0


async def slow(run: Run) -> None:
    run.answer = "partial"
    await asyncio.sleep(60)


async def quick(run: Run) -> None:
    run.answer = "partial"


async def test_a_phase_deadline_holds_after_the_timer_woke_early() -> None:
    # shortest is connect's 0.05 s: the timer wakes then, in the agent phase, and
    # waits on for the agent's own deadline, which alone stops the agent
    began = time.monotonic()
    run = await rollout(
        Task(env=env.name, id="wait"), slow, timeout=Timeouts(connect=0.05, agent=0.3)
    )
    assert run.status == "completed" and run.stop_reason == "timeout" and run.reward == 1.0
    assert time.monotonic() - began >= 0.3


async def test_the_rollout_deadline_names_the_phase_it_cut() -> None:
    task = Task(env=env.name, id="wait", args={"hold": 60})
    run = await rollout(task, quick, timeout=Timeouts(rollout=0.1, start=30))
    assert run.status == "failed" and run.error is not None
    assert (run.error.phase, run.error.type) == ("starting", "RolloutTimeout")
    assert run.error.message == "starting timed out after 0.1s"


async def test_an_inner_timeout_error_is_not_a_breach() -> None:
    async def impatient(run: Run) -> None:
        async with asyncio.timeout(0.01):
            await asyncio.sleep(60)

    run = await rollout(Task(env=env.name, id="wait"), impatient, timeout=Timeouts(agent=30))
    assert run.status == "failed" and run.error is not None
    assert (run.error.phase, run.error.type) == ("agent", "TimeoutError")


async def test_one_timer_per_rollout(monkeypatch: pytest.MonkeyPatch) -> None:
    loop = asyncio.get_running_loop()
    armed: list[float] = []
    call_at = loop.call_at

    def counting(when: float, callback: Any, *args: Any, **kwargs: Any) -> asyncio.TimerHandle:
        armed.append(when)
        return call_at(when, callback, *args, **kwargs)

    tasks = Taskset("t", [Task(env=env.name, id="wait", slug=f"w{i}") for i in range(20)])
    async with LocalRuntime(env) as runtime:
        monkeypatch.setattr(loop, "call_at", counting)
        job = await tasks.run(quick, runtime=runtime, max_concurrent=5)
        monkeypatch.undo()
    assert all(r.reward == 1.0 for r in job.runs)
    # connect and teardown each have a deadline: still at most one timer per rollout,
    # shared by the rollouts due within the same tick
    assert 0 < len(armed) <= 20


def test_shortest_is_the_smallest_limit() -> None:
    assert Timeouts().shortest == 30.0
    assert Timeouts(agent=5, rollout=7).shortest == 5


async def test_rollouts_woken_by_one_tick_fire_only_their_own_deadlines() -> None:
    async def brief(run: Run) -> None:
        run.answer = "partial"
        await asyncio.sleep(0.3)

    task = Task(env=env.name, id="wait")
    cut, spared = await asyncio.gather(
        rollout(task, slow, timeout=Timeouts(agent=0.1)),
        rollout(task, brief, timeout=Timeouts(connect=0.1, agent=30)),  # armed for 0.1 too
    )
    assert cut.stop_reason == "timeout" and cut.reward == 1.0
    assert spared.stop_reason is None and spared.reward == 1.0


def test_a_closed_loop_leaves_no_ticker_behind() -> None:
    async def one() -> None:
        run = await rollout(Task(env=env.name, id="wait"), quick)
        assert run.reward == 1.0

    before = len(_deadline._TICKERS)
    for _ in range(3):
        asyncio.run(one())
    gc.collect()
    assert len(_deadline._TICKERS) <= before
