"""Runs as they end: held until their group has ended, then given the group's rewards,
summarized, kept (or not) and handed to a sink, so a job of 100,000 rollouts need not
hold 100,000 runs."""

from __future__ import annotations

import asyncio
import inspect
import logging
from collections import deque
from collections.abc import Awaitable, Callable
from typing import Any, Protocol, runtime_checkable

from ..agents import Run
from ._groups import apply_group_rewards
from ._job import Job, Keep
from ._summary import RunSummary

__all__ = ["Collector", "RunSink", "SinkLike"]

log = logging.getLogger("proctor.engine")


@runtime_checkable
class RunSink(Protocol):
    """Where a job streams its ended runs (a store's recorder, a file, a queue)."""

    async def add(self, run: Run) -> None:
        """Take one ended run (its group rewards applied); a raise stops the job."""


SinkLike = RunSink | Callable[[Run], Awaitable[None] | None]
"""A `RunSink`, or a plain callable taking the run (sync or async)."""

Members = list[tuple[int, Run]]


def sink_call(sink: SinkLike | None) -> Callable[[Run], Any] | None:
    """The callable that hands a run to `sink`.

    Raises:
        TypeError: `sink` is neither a callable nor has an `add(run)` method.
    """
    if sink is None:
        return None
    add = getattr(sink, "add", None)
    if callable(add):
        return add  # type: ignore[no-any-return]
    if callable(sink):
        return sink
    raise TypeError(f"sink must be callable or have an add(run) method, not {type(sink).__name__}")


class Collector:
    """The runs of `size` planned rollouts, in groups of `group` consecutive ones.

    `finished(i, run)` (sync, from the executor) tells `on_run` at once and holds the
    run until its group has ended; `drain()` (a task beside the executor) then applies
    the group's rewards, counts each member into `job`, keeps what `keep` says of it
    and awaits the sink. `fill()` hands the kept summaries and runs to the job, in
    expansion order.
    """

    def __init__(
        self,
        job: Job,
        size: int,
        group: int,
        *,
        keep: Keep,
        on_run: Callable[[Run], Any] | None,
        sink: Callable[[Run], Any] | None,
    ) -> None:
        self._job = job
        self._summaries: list[RunSummary | None] | None = None
        if keep != "none":
            self._summaries = [None] * size
        self._runs: list[Run | None] | None = [None] * size if keep == "runs" else None
        self._group = group
        self._on_run = on_run
        self._sink = sink
        self._held: dict[str, Members] = {}
        self._ready: deque[Members] = deque()
        self._wake = asyncio.Event()
        self._closed = False
        self.broken = False  # the sink raised: start nothing more

    def finished(self, i: int, run: Run) -> None:
        """Rollout `i` ended with `run`."""
        if self._on_run is not None:
            try:
                self._on_run(run)
            except Exception:  # a broken progress callback must not sink the batch
                log.exception("on_run callback failed for %s", run.slug)
        if self._group == 1:
            self._ready.append([(i, run)])
        else:
            held = self._held.setdefault(run.group_id, [])
            held.append((i, run))
            if len(held) < self._group:
                return
            self._ready.append(self._held.pop(run.group_id))
        self._wake.set()

    async def drain(self) -> None:
        """Settle each group as it ends, until `close()` and nothing is left.

        Raises:
            Exception: what the sink raised (`broken` is then set).
        """
        while True:
            while self._ready:
                await self._settle(self._ready.popleft(), rewards=True)
            if self._closed:
                return
            self._wake.clear()
            await self._wake.wait()

    def close(self) -> None:
        """Nothing more will finish: `drain` returns once the ready groups are settled."""
        self._closed = True
        self._wake.set()

    async def give_up(self) -> None:
        """After an interrupt or a failure: the groups not settled yet (ended or not)
        are summarized, kept and sunk as they are, without group rewards."""
        left = [*self._ready, *self._held.values()]
        self._ready.clear()
        self._held.clear()
        for members in left:
            try:
                await self._settle(members, rewards=False)
            except Exception:  # the job already failed or was interrupted: say, go on
                log.exception("the sink failed on a run of group %s", members[0][1].group_id)

    def fill(self) -> None:
        """Hand the job the summaries and runs kept so far, in expansion order."""
        self._job.summaries.extend([s for s in self._summaries or () if s is not None])
        self._job.runs.extend([r for r in self._runs or () if r is not None])

    async def _settle(self, members: Members, *, rewards: bool) -> None:
        if rewards and len(members) >= 2:
            await apply_group_rewards(run for _, run in members)
        for i, run in members:
            self._job.count(run)
            if self._summaries is not None:
                self._summaries[i] = RunSummary.of(run)
            if self._runs is not None:
                self._runs[i] = run
        if self._sink is not None:
            for _, run in members:
                if not self.broken:
                    await self._give(run)

    async def _give(self, run: Run) -> None:
        assert self._sink is not None
        try:
            out = self._sink(run)
            if inspect.isawaitable(out):
                await out
        except Exception:
            self.broken = True
            raise
