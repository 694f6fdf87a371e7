"""`SubstrateWatch`: the agent phase cut short the moment its substrate dies."""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from .._errors import SubstrateLost

if TYPE_CHECKING:
    from ..agents import Run

__all__ = ["WHY_WAIT", "SubstrateWatch"]

WHY_WAIT = 2.0
"""Seconds a dropped connection waits for the runtime to say how its substrate died."""


class SubstrateWatch:
    """Raise `SubstrateLost` naming the phase and the cause the moment the substrate
    dies (`died` resolves) or the connection to it drops, cancelling what runs inside.

    A dropped connection waits up to `WHY_WAIT` s for `died` to say why. A plain
    (not async) context manager of the rollout's `task`: two callbacks on the normal
    path, no task, no coroutine.
    """

    __slots__ = ("cause", "died", "open", "run", "task", "timer", "unwatch")

    def __init__(self, run: Run, died: asyncio.Future[str] | None, task: asyncio.Task[Any]) -> None:
        self.run = run
        self.died = died
        self.cause: str | None = None
        self.timer: asyncio.TimerHandle | None = None
        self.unwatch: Callable[[], None] | None = None
        self.task = task
        self.open = False

    def __enter__(self) -> None:
        self.open = True
        if self.died is not None:
            self.died.add_done_callback(self._ended)
        if self.run.client is not None:
            self.unwatch = self.run.client.on_lost(self._dropped)

    def __exit__(self, typ: type[BaseException] | None, exc: BaseException | None, tb: Any) -> None:
        # `died`'s callback may already be scheduled: it must not cancel what comes next
        self.open = False
        if self.died is not None:
            self.died.remove_done_callback(self._ended)
        if self.unwatch is not None:
            unwatch, self.unwatch = self.unwatch, None  # it holds our bound method
            unwatch()
        if self.timer is not None:
            self.timer.cancel()
        if self.cause is None:
            return
        if self.task.uncancel() > 0 and typ is asyncio.CancelledError:
            return  # cancelled from outside as well: that wins
        raise SubstrateLost(self.run.phase, self.cause) from exc  # whatever the agent made of it

    def _lost(self, cause: str) -> None:
        if self.open and self.cause is None:
            self.cause = cause
            self.task.cancel()

    def _ended(self, died: asyncio.Future[str]) -> None:
        if not died.cancelled() and died.exception() is None:
            self._lost(died.result())

    def _dropped(self, exc: Exception) -> None:
        cause = f"the connection to the environment dropped ({exc})"
        wait = 0 if self.died is None else WHY_WAIT
        self.timer = asyncio.get_running_loop().call_later(wait, self._lost, cause)
