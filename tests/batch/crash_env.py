"""The environment the crash-resume test serves elsewhere (`proctor serve`): one
template whose agent must run a shell command and then answer `done-<n>`."""

from __future__ import annotations

from collections.abc import AsyncGenerator
from typing import Any

from proctor import Environment

env = Environment("crashy", version="1")
env.add_shell()


@env.template
async def job(n: int) -> AsyncGenerator[Any, Any]:
    answer = yield f"job {n}: run a command in the shell, then answer with its number"
    yield 1.0 if answer == f"done-{n}" else 0.0
