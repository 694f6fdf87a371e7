"""`FakeClock`: a `proctor.models.Clock` whose waits are instant."""

from __future__ import annotations

import asyncio

__all__ = ["FakeClock"]


class FakeClock:
    """A clock whose `sleep` returns at once and moves `now()` forward.

    `sleeps` lists every wait requested, so tests can count waits exactly.
    """

    def __init__(self, start: float = 0.0) -> None:
        self._now = start
        self.sleeps: list[float] = []

    def now(self) -> float:
        """The fake time."""
        return self._now

    def advance(self, seconds: float) -> None:
        """Move the fake time forward without a recorded sleep."""
        self._now += seconds

    async def sleep(self, seconds: float) -> None:
        """Record the wait, advance time, and yield to the loop once."""
        self.sleeps.append(seconds)
        self._now += seconds
        await asyncio.sleep(0)
