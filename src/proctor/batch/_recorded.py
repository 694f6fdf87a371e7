"""`RecordedRollouts`: rollouts of in-memory agents on the engine's pool, each recorded
into a new batch output folder as it goes (or only counted), with the live view.

What `proctor run` runs: its agents are Python objects, not config entries, so it has
no `BatchConfig` for `execute`; its output folder has the same layout all the same.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
from collections.abc import Callable, Sequence
from typing import IO, TYPE_CHECKING, Any, Protocol

from ._batch_runner import identity
from ._groups import GroupRewards, group_sizes
from ._recording import Recording, state_of
from ._setup import _SECRET_NAME, redactor
from ._tally import Tally
from ._view import LiveView

if TYPE_CHECKING:
    from ..agents import Run
    from ..engine import RunSpec
    from ..proxy import InterceptionProxy
    from ..store import BatchStore
    from ._config import Assignment

__all__ = ["RecordedRollouts"]


class RecordedRollouts:
    """Runs `spec` on the engine's pool, rollout `i` recorded as `assignments[i]`.

    With `output_dir`, a new output folder (docs/batch-layout.md) holds `meta` as its
    `batch.json` (plus this runner's identity, for `reconcile`) and every rollout as it
    goes; the values of secret-looking variables and of `secrets` are never written.
    Without it the rollouts are only counted for the live view. Each rollout gets a
    session on `proxy`, to grade, on `judge`, and for its simulated users, on `user`
    (see `execute_run`). `on_run` hears each run once its group
    has ended (with its group rewards); `runs` (by index; only with `keep_runs`, else
    empty: no run outlives its group) and `wall_s` hold what ended, also after an interrupt.
    """

    def __init__(
        self,
        spec: RunSpec,
        assignments: Sequence[Assignment],
        *,
        output_dir: str | None = None,
        meta: dict[str, Any] | None = None,
        secrets: Sequence[str] = (),
        proxy: InterceptionProxy | None = None,
        judge: InterceptionProxy | None = None,
        user: InterceptionProxy | None = None,
        on_run: Callable[[Run], None] | None = None,
        keep_runs: bool = True,
    ) -> None:
        if len(assignments) != len(spec.rollouts):
            raise ValueError("one assignment per planned rollout")
        self.spec = spec
        self.assignments = assignments
        self.output_dir = output_dir
        self.meta = {**(meta or {}), "runner": identity()}
        self.secrets = secrets
        self.proxy = proxy
        self.judge = judge
        self.user = user
        self.on_run = on_run
        self.runs: list[Run | None] = [None] * len(spec.rollouts) if keep_runs else []
        self.keep_runs = keep_runs
        self.wall_s = 0.0

    async def run(self, *, view: IO[str] | None = None, title: str = "") -> None:
        """Run every rollout, showing progress on `view` (None: nowhere)."""
        tally = Tally(len(self.spec.rollouts))
        async with contextlib.AsyncExitStack() as stack:
            store = self._open_store(stack)
            if view is not None:
                await stack.enter_async_context(LiveView(tally, stream=view, title=title))
            tally.begin()
            try:
                await self._drain(store, tally)
            finally:
                tally.end()  # the live view's last rate is the summary's
                self.wall_s = tally.snapshot()["elapsed_s"]

    def _open_store(self, stack: contextlib.AsyncExitStack) -> BatchStore | None:
        if self.output_dir is None:
            return None
        from ..store import BatchStore

        values = {v for k, v in os.environ.items() if _SECRET_NAME.search(k)} | set(self.secrets)
        secrets = sorted((v.encode() for v in values if len(v) >= 8), key=len, reverse=True)
        store = BatchStore.create(self.output_dir, self.meta, redact=redactor(secrets))
        stack.callback(store.close)
        store.add_assignments(self.assignments)
        return store

    async def _drain(self, store: BatchStore | None, tally: Tally) -> None:
        from ..engine import for_each

        planned = self.spec.rollouts
        sizes = group_sizes(p.group_id for p in planned)
        groups = GroupRewards(store, sizes) if max(sizes.values(), default=1) >= 2 else None

        async def one(i: int) -> None:
            run = await self._one(i, store, tally)
            if self.keep_runs:
                self.runs[i] = run
            ended = [run]
            if groups is not None:
                ended = [
                    r for _, r in await groups.ended(planned[i].group_id, self.assignments[i], run)
                ]
            if self.on_run is not None:
                for r in ended:
                    self.on_run(r)

        try:
            await for_each(range(len(planned)), one, max_concurrent=self.spec.max_concurrent)
        finally:  # an interrupted run still hands over the runs of groups that never ended
            if groups is not None and self.on_run is not None:
                for _, run in groups.unfinished():
                    self.on_run(run)

    async def _one(self, i: int, store: BatchStore | None, tally: Tally) -> Run:
        """One rollout, recorded as it goes (phases, model turns, outcome)."""
        from ..agents import Run
        from ..engine import execute_run

        spec, planned = self.spec, self.spec.rollouts[i]
        run = Run(
            planned.task, job_id=spec.job_id, group_id=planned.group_id, trace_id=planned.trace_id
        )
        track: _Tracker
        if store is not None:
            track = Recording(run, store.begin(self.assignments[i]), tally)
        else:
            track = _Counted(run, tally)
        tally.move("queued", "starting")
        try:
            await execute_run(
                run,
                spec.agents[planned.agent],
                runtime=spec.runtime,
                timeout=spec.timeouts,
                proxy=self.proxy,
                judge=self.judge,
                user=self.user,
                observers=(track,),
            )
        except asyncio.CancelledError:
            track.finish("interrupted")
            raise
        track.finish("completed" if run.status == "completed" else "failed")
        return run


class _Tracker(Protocol):
    def phase_changed(self, run: Run, phase: str) -> None: ...

    def finish(self, status: str) -> str: ...


class _Counted:
    """The live view's counts for a rollout that is not recorded."""

    def __init__(self, run: Run, tally: Tally) -> None:
        self.run = run
        self.tally = tally
        self.state = "starting"

    def phase_changed(self, run: Run, phase: str) -> None:
        state = state_of(phase)
        if state != self.state:
            self.tally.move(self.state, state)
            self.state = state

    def finish(self, status: str) -> str:
        final = {"completed": "done", "failed": "failed"}.get(status, "interrupted")
        self.tally.move(self.state, final)
        self.tally.ended(reward=self.run.reward, cost=self.run.cost)
        self.state = final
        return final
