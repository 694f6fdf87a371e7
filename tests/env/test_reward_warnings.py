"""A template that never yields its reward, or a dict reward with keys proctor does not
read, still scores, but says so: a warning logged and kept in the grade's info."""

from __future__ import annotations

import logging
from typing import Any

import pytest

from proctor import Environment, LocalRuntime, agent_from_fn, rollout

env = Environment("warned")


@env.template
async def silent() -> Any:
    yield "answer anything"


@env.template
async def extra_keys() -> Any:
    yield "answer anything"
    yield {"score": 1.0, "reason": "kept nowhere", "scroe": 0.5}


@env.template
async def clean() -> Any:
    yield "answer anything"
    yield {"score": 1.0, "info": {"why": "fine"}}


async def _grade(task: Any) -> Any:
    run = await rollout(task, agent_from_fn(lambda p: "x"), runtime=LocalRuntime(env))
    assert run.grade is not None, run.error
    return run.grade


async def test_a_missing_second_yield_scores_zero_with_a_warning(
    caplog: pytest.LogCaptureFixture,
) -> None:
    with caplog.at_level(logging.WARNING, logger="proctor.env"):
        grade = await _grade(silent())
    assert grade.reward == 0.0
    assert grade.info["proctor_warnings"] == ["the template ended without a second yield; scored 0"]
    assert "without a second yield" in caplog.text


async def test_unknown_reward_keys_are_named_in_a_warning() -> None:
    grade = await _grade(extra_keys())
    assert grade.reward == 1.0
    assert grade.info["proctor_warnings"] == [
        "reward dict has unknown keys ['reason', 'scroe']; ignored"
    ]


async def test_a_clean_reward_has_no_warning() -> None:
    grade = await _grade(clean())
    assert grade.info == {"why": "fine"}
