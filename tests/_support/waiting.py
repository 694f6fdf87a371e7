"""Waiting for a condition another process reaches, where no event crosses over to us.

Within one process, tests wait on `asyncio.Event`s the code under test sets. A peer
process (HUD's server, a driver) offers nothing to wait on but its observable state:
these poll that state briefly until it holds.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable

POLL = 0.01

Condition = Callable[[], bool | Awaitable[bool]]


async def until(condition: Condition, what: str, within: float = 10.0) -> None:
    """Return once `condition()` is true; AssertionError naming `what` after `within` s."""
    deadline = time.monotonic() + within
    while True:
        held = condition()
        if not isinstance(held, bool):
            held = await held
        if held:
            return
        if time.monotonic() > deadline:
            raise AssertionError(f"not reached within {within:g}s: {what}")
        await asyncio.sleep(POLL)


def wait_until(condition: Callable[[], bool], within: float = 10.0) -> bool:
    """Block until `condition()` is true or `within` s pass; whether it came true."""
    deadline = time.monotonic() + within
    while not condition():
        if time.monotonic() > deadline:
            return False
        time.sleep(POLL)
    return True
