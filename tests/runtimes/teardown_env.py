"""An environment whose shutdown hook raises: its rollouts must record the failure."""

from __future__ import annotations

from collections.abc import AsyncGenerator
from typing import Any

from proctor import Environment

env = Environment("teardown-probe")


@env.shutdown
async def broken_shutdown() -> None:
    raise RuntimeError("shutdown boom")


@env.template
async def answer() -> AsyncGenerator[Any, Any]:
    yield "say anything"
    yield 1.0
