"""Group rewards: registered on the environment, evaluated over the members of a group
(`evaluate_group`, as the driver calls it), and the built-ins' arithmetic."""

from __future__ import annotations

import math
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from proctor import Environment, TemplateError
from proctor.env import GroupMember, GroupReward, evaluate_group, group_rewards
from proctor.records import Task


def members(*rewards: float | None) -> list[GroupMember]:
    task = Task(env="group", id="t")
    return [
        GroupMember(
            slug=task.slug,
            task=task,
            answer=str(r),
            reward=r,
            error=None if r is not None else "agent: crashed",
        )
        for r in rewards
    ]


def test_registration_bare_or_with_options() -> None:
    env = Environment("group-registration")

    @env.group_reward
    def spread(runs: list[GroupMember]) -> float:
        return 0.0

    best = env.group_reward(weight=0.5)(group_rewards.best_of_n())
    env.group_reward(name="p2")(group_rewards.pass_at_k(2))
    assert env.group_rewards == [
        GroupReward("spread", spread, 0.0),
        GroupReward("best_of_n", best, 0.5),
        GroupReward("p2", env.group_rewards[2].fn, 0.0),
    ]
    with pytest.raises(TemplateError, match="duplicate group reward 'spread'"):
        env.group_reward(spread)
    with pytest.raises(TemplateError, match="weight must be finite and >= 0"):
        env.group_reward(weight=-0.1)(lambda runs: 0.0)
    with pytest.raises(TemplateError, match="is not callable"):
        env.group_reward(3)  # type: ignore[call-overload]


async def test_evaluate_group_runs_each_and_records_errors() -> None:
    env = Environment("group-evaluate")

    @env.group_reward
    async def mean(runs: list[GroupMember]) -> float:
        return sum(r.reward or 0.0 for r in runs) / len(runs)

    @env.group_reward
    def each(runs: list[GroupMember]) -> list[float]:
        return [1.0 if r.error is None else 0.0 for r in runs]

    @env.group_reward
    def too_few(runs: list[GroupMember]) -> list[float]:
        return [1.0]

    @env.group_reward
    def raises(runs: list[GroupMember]) -> float:
        raise ZeroDivisionError("no")

    @env.group_reward
    def not_finite(runs: list[GroupMember]) -> Any:
        return math.nan

    env.group_reward(weight=1.0)(group_rewards.grpo_advantage())  # negative, yet weighed
    env.group_reward(name="unweighed")(group_rewards.grpo_advantage())

    values, errors = await evaluate_group(env, members(1.0, 0.0, None))
    assert values == {
        "mean": [1 / 3] * 3,
        "each": [1.0, 1.0, 0.0],
        "unweighed": pytest.approx([2 / 3, -1 / 3, -1 / 3]),
    }
    assert errors == {
        "too_few": "ValueError: returned 1 values for a group of 3",
        "raises": "ZeroDivisionError: no",
        "not_finite": "ValueError: returned nan, not a finite number",
        "grpo_advantage": "ValueError: returned -0.3333333333333333, outside [0, 1], with a weight",
    }


def test_pass_at_k_is_the_unbiased_estimate() -> None:
    pass_at_1, pass_at_2 = group_rewards.pass_at_k(1), group_rewards.pass_at_k(2)
    assert pass_at_2.__name__ == "pass_at_2"
    group = members(1.0, 0.0, 0.0, None)
    assert pass_at_1(group) == pytest.approx(1 / 4)
    assert pass_at_2(group) == pytest.approx(1 - math.comb(3, 2) / math.comb(4, 2))
    assert group_rewards.pass_at_k(2, threshold=0.5)(members(0.6, 0.4)) == 1.0
    with pytest.raises(ValueError, match="needs a group of at least 2"):
        pass_at_2(members(1.0))
    with pytest.raises(ValueError, match="k must be an int >= 1"):
        group_rewards.pass_at_k(0)


def test_best_of_n_rank_and_grpo_advantage() -> None:
    group = members(0.5, 1.0, None, 0.5)
    assert group_rewards.best_of_n()(group) == 1.0
    assert group_rewards.rank()(group) == [0.5, 1.0, 0.0, 0.5]
    assert group_rewards.rank()(members(0.3)) == [1.0]
    assert group_rewards.grpo_advantage()(group) == [0.0, 0.5, -0.5, 0.0]
    normalized = group_rewards.grpo_advantage(normalize=True)(group)
    assert normalized == pytest.approx([0.0, 0.5 / math.sqrt(0.125), -0.5 / math.sqrt(0.125), 0.0])
    assert group_rewards.grpo_advantage(normalize=True)(members(1.0, 1.0)) == [0.0, 0.0]


@given(st.lists(st.floats(0, 1, allow_nan=False), min_size=2, max_size=12))
def test_built_in_values_stay_in_range(rewards: list[float]) -> None:
    group = members(*rewards)
    ranks = group_rewards.rank()(group)
    assert all(0.0 <= r <= 1.0 for r in ranks)
    advantages = group_rewards.grpo_advantage()(group)
    assert sum(advantages) == pytest.approx(0.0, abs=1e-9)
    for k in range(1, len(rewards) + 1):
        assert 0.0 <= group_rewards.pass_at_k(k)(group) <= 1.0
