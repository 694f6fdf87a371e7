"""Group rewards and advantages in `run_taskset` (issue 13): computed once every run
of a group ended, from the row's environment's `@env.group_reward`s."""

from __future__ import annotations

import itertools
from collections.abc import AsyncGenerator, Iterator
from typing import Any

import pytest

from proctor import Environment, Run, Taskset
from proctor.engine import run_taskset
from proctor.env import GroupMember, group_rewards

env = Environment("grouped")
members: list[list[GroupMember]] = []


@env.template
async def guess(level: int = 0) -> AsyncGenerator[Any, Any]:
    answer = yield "a number in [0, 1]"
    if answer == "crash":
        raise RuntimeError("cannot grade that")
    yield float(answer)


env.group_reward(weight=0.0, name="best")(group_rewards.best_of_n())


@env.group_reward(weight=1.0)
def is_best(runs: list[GroupMember]) -> list[float]:
    members.append(list(runs))
    top = max(r.reward or 0.0 for r in runs)
    return [1.0 if r.reward == top else 0.0 for r in runs]


plain = Environment("grouped-plain")


@plain.template
async def same(value: float) -> AsyncGenerator[Any, Any]:
    answer = yield "anything"
    yield float(answer)


failing = Environment("grouped-failing")


@failing.template
async def graded(value: float) -> AsyncGenerator[Any, Any]:
    answer = yield "anything"
    yield float(answer)


@failing.group_reward
def quiet(runs: list[GroupMember]) -> float:
    raise ValueError("weightless and broken")


@failing.group_reward(weight=2.0)
def loud(runs: list[GroupMember]) -> list[float]:
    return [1.0]  # one value for a group of two


@pytest.fixture(autouse=True)
def _clear() -> None:
    members.clear()


def answering(*answers: str) -> Any:
    """An agent giving `answers` in turn (runs go one at a time: max_concurrent=1)."""
    it: Iterator[str] = itertools.cycle(answers)

    async def agent(run: Run) -> None:
        run.answer = next(it)

    return agent


async def test_group_rewards_join_the_grade_and_advantages_follow() -> None:
    job = await run_taskset([guess()], answering("0", "0.5", "1", "0.5"), group=4, max_concurrent=1)
    assert [r.group_rewards for r in job.runs] == [
        {"best": 1.0, "is_best": 0.0},
        {"best": 1.0, "is_best": 0.0},
        {"best": 1.0, "is_best": 1.0},
        {"best": 1.0, "is_best": 0.0},
    ]
    # `best` weighs nothing; `is_best` (weight 1) is a subscore beside the template's own.
    assert [r.reward for r in job.runs] == [0.0, 0.25, 1.0, 0.25]
    grade = job.runs[1].grade
    assert grade is not None and grade.subscores == [
        {"name": "guess", "value": 0.5, "weight": 1.0},
        {"name": "is_best", "value": 0.0, "weight": 1.0},
    ]
    assert [r.advantage for r in job.runs] == [-0.375, -0.125, 0.625, -0.125]
    assert job.runs[2].to_dict()["group_rewards"] == {"best": 1.0, "is_best": 1.0}
    assert job.runs[2].to_dict()["advantage"] == 0.625


async def test_group_members_carry_what_a_group_reward_needs() -> None:
    job = await run_taskset([guess(level=3)], answering("0.25", "crash"), group=2, max_concurrent=1)
    [seen] = members
    ok, crashed = seen
    assert (ok.slug, ok.answer, ok.reward, ok.error) == (job.runs[0].slug, "0.25", 0.25, None)
    assert ok.task == guess(level=3) and ok.trace_id == job.runs[0].trace_id
    assert (crashed.answer, crashed.reward) == ("crash", None)
    assert crashed.error is not None and "cannot grade that" in crashed.error
    # The failed run hears the group's values but has no grade to join nor an advantage.
    assert job.runs[1].group_rewards == {"best": 0.25, "is_best": 0.0}
    assert (job.runs[1].reward, job.runs[1].advantage) == (None, None)
    assert job.runs[0].advantage == 0.0  # the only graded run is its own mean


async def test_each_group_is_rewarded_apart() -> None:
    tasks = Taskset("two", [guess(level=1), guess(level=2)])
    job = await run_taskset(tasks, answering("1", "0", "0.5", "0.5"), group=2, max_concurrent=1)
    assert len(members) == 2 and [len(m) for m in members] == [2, 2]
    groups = job.groups()
    assert list(groups) == list(dict.fromkeys(r.group_id for r in job.runs))
    first, second = groups.values()
    assert [r.advantage for r in first] == [0.5, -0.5]
    assert [r.advantage for r in second] == [0.0, 0.0]  # a tie: both best


async def test_group_rewards_with_a_group_of_one_are_refused_before_anything_runs() -> None:
    started: list[Run] = []

    async def agent(run: Run) -> None:
        started.append(run)

    with pytest.raises(ValueError, match=r"grouped.*group >= 2"):
        await run_taskset([same(value=1.0), guess()], agent, group=1)
    assert started == []


async def test_advantages_need_no_group_reward() -> None:
    job = await run_taskset([same(value=0)], answering("1", "0", "0.5"), group=3, max_concurrent=1)
    assert [r.advantage for r in job.runs] == [0.5, -0.5, 0.0]
    assert all(r.group_rewards == {} for r in job.runs)
    alone = await run_taskset([same(value=0)], answering("1"), group=1)
    assert alone.runs[0].advantage is None and "advantage" not in alone.runs[0].to_dict()


async def test_a_raising_group_reward_is_recorded_and_fails_the_evaluation_if_it_weighs() -> None:
    job = await run_taskset([graded(value=0)], answering("1", "0.5"), group=2, max_concurrent=1)
    for run in job.runs:
        assert run.status == "completed" and run.grade is not None
        errors = run.grade.info["errors"]
        assert errors["quiet"] == "ValueError: weightless and broken"
        assert "1 values for a group of 2" in errors["loud"]
        assert run.grade.is_error and run.evaluation_failed  # `loud` weighs 2
        assert run.grade.subscores[-1]["value"] == 0.0
        assert run.grade.subscores[-1]["info"]["error"] == errors["loud"]
        assert run.group_rewards == {}
    assert [r.reward for r in job.runs] == [pytest.approx(1 / 3), pytest.approx(0.5 / 3)]
