"""The trivial proctor environment the benchmark drives (twin of `hud_env.py`).

One template, no hooks, no capabilities: whatever a rollout costs here is the
framework's own overhead.
"""

from __future__ import annotations

from collections.abc import AsyncGenerator

from proctor import Environment

env = Environment("bench")


@env.template
async def answer42(i: int = 0) -> AsyncGenerator[str | float, str]:
    """Reply with 42."""
    answer = yield f"#{i}: reply with 42"
    yield 1.0 if answer == "42" else 0.0
