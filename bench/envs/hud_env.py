"""The trivial HUD environment the benchmark drives (twin of `proctor_env.py`).

Imported only under the peers python (hud==0.6.21).
"""

from __future__ import annotations

from hud import Environment

env = Environment("bench")


@env.template(id="answer42")
async def answer42(i: int = 0):  # type: ignore[no-untyped-def]
    """Reply with 42."""
    answer = yield f"#{i}: reply with 42"
    yield 1.0 if answer == "42" else 0.0
