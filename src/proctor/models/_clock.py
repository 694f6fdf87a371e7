"""Clocks: the real one, and a fake one that makes waiting instant in tests."""

from __future__ import annotations

import asyncio
import time
from typing import Protocol

__all__ = ["Clock", "FakeClock", "SystemClock"]


class Clock(Protocol):
    """What the retry loop needs of time."""

    def now(self) -> float:
        """Seconds on a monotonic scale."""
        ...

    async def sleep(self, seconds: float) -> None:
        """Wait `seconds`."""
        ...


class SystemClock:
    """`time.monotonic` and `asyncio.sleep`."""

    def now(self) -> float:
        """Monotonic seconds."""
        return time.monotonic()

    async def sleep(self, seconds: float) -> None:
        """Sleep for real."""
        await asyncio.sleep(seconds)


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
