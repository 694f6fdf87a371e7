"""`Clock`: every deadline of one rollout on one timer."""

from __future__ import annotations

import asyncio
import contextlib
import math
import weakref
from typing import TYPE_CHECKING, Any

from .._errors import RolloutTimeout

if TYPE_CHECKING:
    from ..agents import Run

__all__ = ["Clock", "Span"]

_UNLIMITED = contextlib.nullcontext()


class Clock:
    """One rollout's deadlines on one timer.

    `scope(limit)` bounds what runs inside it (a phase, or the whole rollout) to `limit`
    seconds; scopes nest. When a scope's deadline passes, the task is cancelled and the
    scope raises `RolloutTimeout` naming the phase the run is in then; a `TimeoutError`
    raised inside for any other reason passes through, and a cancellation from outside
    as well wins.

    `task` is the rollout's (every scope is entered in it). The timer is armed once,
    at the soonest any scope could end (now plus `shortest`, the smallest limit the
    rollout has), and re-armed only when it fires before a deadline has passed: a
    rollout that ends sooner costs one timer, however many scopes it entered. Timers
    are shared: the clocks due within the same `TICK` of a loop ring together (so a
    deadline is met at most `TICK` late).
    """

    __slots__ = ("due", "fired", "run", "shortest", "spans", "task", "ticker")

    def __init__(self, run: Run, shortest: float | None, task: asyncio.Task[Any]) -> None:
        self.run = run
        self.shortest = shortest
        self.task = task
        self.due = math.inf  # the tick the clock is armed for
        self.ticker: _Ticker | None = None
        self.spans: list[Span] = []
        self.fired: Span | None = None

    def scope(self, limit: float | None) -> contextlib.AbstractContextManager[None]:
        """A deadline `limit` seconds from entry; no limit, no scope."""
        return _UNLIMITED if limit is None else Span(self, limit)

    def close(self) -> None:
        """Stop the timer (the rollout is over)."""
        if self.ticker is not None:
            self.ticker.remove(self)
            self.due = math.inf

    def _arm(self, loop: asyncio.AbstractEventLoop, when: float) -> None:
        ticker = self.ticker
        if ticker is None:
            ticker = self.ticker = _ticker(loop)
        else:
            ticker.remove(self)
        self.due = ticker.add(self, when, loop)

    def _fire(self) -> None:
        self.due = math.inf
        spans = self.spans
        if not spans or self.task.done():
            return
        loop = asyncio.get_running_loop()
        now = loop.time()
        first = min(spans, key=_end)
        if first.end <= now:
            self.fired = first
            self.task.cancel()
            return
        # early: wait for the nearest deadline, or sooner for a scope yet to begin
        self._arm(loop, min(first.end, now + (self.shortest or math.inf)))


class Span:
    """One scope of a `Clock` (see `Clock.scope`)."""

    __slots__ = ("cancelling", "clock", "end", "limit")

    def __init__(self, clock: Clock, limit: float) -> None:
        self.clock = clock
        self.limit = limit
        self.end = math.inf
        self.cancelling = 0

    def __enter__(self) -> None:
        clock = self.clock
        loop = asyncio.get_running_loop()
        self.cancelling = clock.task.cancelling()
        now = loop.time()
        self.end = now + self.limit
        clock.spans.append(self)
        if self.end <= clock.due - TICK:
            # no timer yet, or one due a tick or more after us (a timer due within the
            # same tick rings in time): arm it at the soonest any scope can end
            shortest = clock.shortest if clock.shortest is not None else self.limit
            clock._arm(loop, min(self.end, now + shortest))

    def __exit__(self, typ: type[BaseException] | None, exc: BaseException | None, tb: Any) -> None:
        clock = self.clock
        clock.spans.remove(self)
        if clock.fired is not self:
            return
        clock.fired = None
        mine = clock.task.uncancel() <= self.cancelling
        if mine and typ is not None and issubclass(typ, asyncio.CancelledError | TimeoutError):
            raise RolloutTimeout(clock.run.phase, self.limit) from None


def _end(span: Span) -> float:
    return span.end


TICK = 1 / 32
"""Seconds by which the deadlines of a loop are grouped onto shared timers."""


class _Ticker:
    """One loop's armed clocks by the tick they are due at, one timer per tick (it
    holds no reference to its loop, which keeps it in `_TICKERS` only while alive)."""

    __slots__ = ("ticks",)

    def __init__(self) -> None:
        self.ticks: dict[float, set[Clock]] = {}

    def add(self, clock: Clock, when: float, loop: asyncio.AbstractEventLoop) -> float:
        """Arm `clock` at the first tick at or after `when`; that tick."""
        due = math.ceil(when / TICK) * TICK
        clocks = self.ticks.get(due)
        if clocks is None:
            clocks = self.ticks[due] = set()
            loop.call_at(due, self._ring, due)
        clocks.add(clock)
        return due

    def remove(self, clock: Clock) -> None:
        clocks = self.ticks.get(clock.due)
        if clocks is not None:
            clocks.discard(clock)

    def _ring(self, due: float) -> None:
        for clock in self.ticks.pop(due, ()):
            clock._fire()


def _ticker(loop: asyncio.AbstractEventLoop) -> _Ticker:
    ticker = _TICKERS.get(loop)
    if ticker is None:
        ticker = _TICKERS[loop] = _Ticker()
    return ticker


_TICKERS: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, _Ticker] = (
    weakref.WeakKeyDictionary()
)
