"""A checkpoint a `ComputerAgent` cannot continue from is refused with one error naming
why, before any model turn: another agent's state, a model turn in flight (it may have
been charged), a frame file that is gone."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from proctor import LocalRuntime, Task
from proctor.agents import ComputerAgent, Run
from proctor.engine import rollout
from proctor.testing import FakeModelServer

TK_ENV = Path(__file__).with_name("tk_env.py")
HISTORY = [
    {
        "role": "user",
        "content": [
            {"type": "text", "text": "Type 'hello' into the entry and press Submit."},
            {"type": "image", "media_type": "image/png", "path": "0123abcd.png"},
        ],
    }
]


@pytest.mark.parametrize(
    ("state", "error"),
    [
        pytest.param(
            {"turns": 1, "messages": HISTORY},
            "this checkpoint was not saved by a ComputerAgent",
            id="another-agents",
        ),
        pytest.param(
            {"computer": 1, "turns": 1, "messages": HISTORY, "in_flight": True},
            "this checkpoint has a model turn in flight",
            id="in-flight",
        ),
        pytest.param(
            {"computer": 1, "turns": 1, "messages": HISTORY, "stats": {}},
            "checkpoint: frame '0123abcd.png' is not in",
            id="frame-gone",
        ),
    ],
)
async def test_a_checkpoint_that_cannot_continue_is_refused(
    tmp_path: Path, state: dict[str, Any], error: str
) -> None:
    async with FakeModelServer([]) as fake:
        agent = ComputerAgent(f"fake/m@{fake.url}", frames_dir=tmp_path)

        async def restored(run: Run) -> None:
            run.restored = state
            await agent(run)

        async with LocalRuntime(TK_ENV) as runtime:
            run = await rollout(Task(env="tk-form", id="fill_form"), restored, runtime=runtime)
    assert run.error is not None and run.error.phase == "agent"
    assert error in run.error.message, run.error
    assert fake.requests == []  # refused before any model turn
