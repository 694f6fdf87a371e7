"""A lifecycle hook's failure names its phase on the run (`setup`, `finalize`)."""

from __future__ import annotations

from collections.abc import AsyncGenerator
from typing import Any

from proctor import Environment, rollout
from proctor.agents import agent_from_fn

env = Environment("hook-phases")


@env.template
async def before() -> AsyncGenerator[Any, Any]:
    yield "prompt"
    yield 1.0


@before.setup
def broken_setup() -> None:
    raise OSError("no fixtures")


@env.template
async def after() -> AsyncGenerator[Any, Any]:
    yield "prompt"
    yield 1.0


@after.finalize
def broken_finalize() -> None:
    raise OSError("build failed")


agent = agent_from_fn(lambda prompt: "done")


async def test_a_failing_setup_hook_fails_the_run_in_setup() -> None:
    run = await rollout(before(), agent)
    assert run.status == "failed" and run.error is not None
    assert run.error.phase == "setup" and "no fixtures" in run.error.message
    assert run.launch_attempts == 1  # the task's own error: not relaunched


async def test_a_failing_finalize_hook_fails_the_run_in_finalize() -> None:
    run = await rollout(after(), agent)
    assert run.status == "failed" and run.error is not None
    assert run.error.phase == "finalize" and "build failed" in run.error.message
    assert run.reward is None
