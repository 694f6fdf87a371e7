"""A row's own deadlines (`runtime_config["timeouts"]`, e.g. a Harbor task.toml's) tighten
the rollout's: the agent is stopped at the row's limit and graded on what it left."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncGenerator
from typing import Any

from proctor import Environment, Run, Task, rollout
from proctor.engine import Timeouts

env = Environment("row-deadlines")


@env.template
async def wait() -> AsyncGenerator[Any, Any]:
    answer = yield "take your time"
    yield 1.0 if answer == "partial" else 0.0


async def slow(run: Run) -> None:
    run.answer = "partial"
    await asyncio.sleep(60)


def _row(**timeouts: Any) -> Task:
    return Task(env=env.name, id="wait", runtime_config={"timeouts": timeouts})


async def test_the_row_agent_deadline_stops_the_agent_and_it_is_graded() -> None:
    run = await rollout(_row(agent=0.2), slow, timeout=Timeouts(agent=1800))
    assert run.status == "completed" and run.stop_reason == "timeout"
    assert run.reward == 1.0


def test_the_smaller_of_the_two_deadlines_wins_and_junk_is_ignored() -> None:
    base = Timeouts(agent=10, grade=None)
    tight = base.for_row({"timeouts": {"agent": 30, "grade": 5, "start": "soon", "x": 1}})
    assert (tight.agent, tight.grade, tight.start) == (10, 5, None)
    assert base.for_row(None) is base and base.for_row({"timeouts": [1]}) is base
