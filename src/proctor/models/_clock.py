"""Clocks: the protocol the retry loop waits on, and the real one.

`proctor.testing.FakeClock` is the fake that makes waiting instant in tests.
"""

from __future__ import annotations

import asyncio
import time
from typing import Protocol

__all__ = ["Clock", "SystemClock"]


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
