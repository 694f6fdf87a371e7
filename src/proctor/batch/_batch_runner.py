"""`Runner`: runs a batch's work items on its store, `max_concurrent` at a time.

Each rollout is recorded as it goes (`_recording`); what a Python agent prints goes
to its rollout's `log.txt` (`_agent_output`); launching stops at the batch cost cap;
leftover substrates are reconciled at exit. A failure of the runner itself (a full
disk) ends the run with a result that names it, never without one.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import socket
import time
from collections.abc import Iterator
from contextlib import AsyncExitStack
from pathlib import Path
from typing import IO, Any, Protocol

import orjson

from .._errors import SubstrateLost
from .._tempdirs import owner
from ..store import BatchStore, list_rollouts, read_rollout, recorded_cost
from ._agent_output import Printed, captured, routed_stdout
from ._batch_result import BatchResult, received_signal
from ._config import Assignment, RayExecutorConfig
from ._groups import Earlier, GroupRewards, Member, group_sizes, run_from_record
from ._recording import Recording
from ._setup import Setup
from ._tally import Tally

__all__ = ["Runner", "Work", "WorkItems", "assignment_of", "describe", "identity", "spent"]

# Live-view states as record statuses (starting, running and grading are "running").
_TALLY_STATUS = {
    "queued": "queued",
    "done": "completed",
    "failed": "failed",
    "interrupted": "interrupted",
}
Work = tuple[Assignment, int, dict[str, Any] | None]
"""An assignment, its attempt, and the parked session and checkpoint to continue."""


class WorkItems(Protocol):
    """A runner's work: sized and iterable, so it may be made as the pool takes it."""

    def __len__(self) -> int: ...

    def __iter__(self) -> Iterator[Work]: ...


def describe(exc: BaseException) -> str:
    """`Type: message` of the first real error inside any exception groups."""
    while isinstance(exc, BaseExceptionGroup) and exc.exceptions:
        exc = exc.exceptions[0]
    return f"{type(exc).__name__}: {str(exc).splitlines()[0] if str(exc) else ''}".rstrip(": ")


def identity() -> dict[str, Any]:
    """This process as `reconcile` finds it again: pid, start time (clock ticks), host."""
    me = owner(os.getpid()) or f"{os.getpid()}-0"
    return {"pid": os.getpid(), "start_time": me.split("-")[1], "host": socket.gethostname()}


def spent(out: str) -> float:
    """USD recorded so far, earlier attempts (moved aside by a retry) included."""
    total = recorded_cost(out)
    for path in Path(out, "rollouts").glob("*/attempts/*/rollout.json"):
        with contextlib.suppress(OSError, orjson.JSONDecodeError):
            total += orjson.loads(path.read_bytes()).get("cost") or 0.0
    return total


def assignment_of(row: dict[str, Any]) -> Assignment:
    """The (enabled) assignment an index row is the rollout of."""
    return Assignment(
        rollout_id=row["id"],
        task=row["task"],
        agent=row["agent"],
        model=row["model"],
        repeat=row["repeat"],
        enabled=True,
    )


class Runner:
    """Runs work items on a store with at most `max_concurrent` in flight."""

    def __init__(self, store: BatchStore, setup: Setup, mode: str) -> None:
        self.store = store
        self.setup = setup
        self.mode = mode
        self.config = setup.config
        self.timeouts = setup.config.timeouts.to_timeouts()
        self.tally: Tally | None = None
        self.stopped: str | None = None
        self.error: str | None = None
        self.ran = 0
        self.groups: GroupRewards | None = None

    async def run(
        self,
        work: WorkItems,
        total: int,
        view: IO[str] | None,
        *,
        again: dict[str, int] | None = None,
    ) -> BatchResult:
        """Run `work` (`total` rollouts in the batch); `again` counts, by status, the
        ended rollouts among `work` that get a new attempt (they count as queued)."""
        store, setup = self.store, self.setup
        self._event("runner", **identity(), mode=self.mode, work=len(work))
        self.tally = tally = Tally(total)
        if self.config.repeats >= 2:
            sizes = group_sizes(_group(a) for a, _, _ in work)
            earlier = self._earlier(work) if self.mode == "resume" else None  # a new batch:
            self.groups = GroupRewards(store, sizes, earlier)  # nothing ended before it
        for state, n in _final_counts(store.path, again or {}).items():
            tally.preset(state, n)
        t0 = time.monotonic()
        try:
            stack = AsyncExitStack()
            try:
                await setup.open(stack)
                if self.mode == "resume":  # work is a list there
                    setup.claim({self._target(adopted) for _, _, adopted in work if adopted})
                await self._view(stack, view)
                tally.begin()
                with routed_stdout():
                    try:
                        await self._drain(work)
                    finally:
                        tally.end()
            finally:
                await self._close(stack)
        except asyncio.CancelledError:
            self.stopped = "interrupted"
            self._event("interrupted", signal=received_signal())
        except Exception as exc:  # the runner's own failure: what ran stays recorded
            self._failed(exc)
            self._event("runner_error", error=self.error)
        finally:
            wall = time.monotonic() - t0
            await self._reconcile()
            result = self._result(wall)
            self._event("finished", counts=result.counts, ran=result.ran, wall_s=wall)
            try:
                store.close()
            except Exception as exc:  # a full disk: the result still says so
                self._failed(exc)
                result = self._result(wall)
        return result

    def _tallied(self) -> dict[str, int]:
        """Every rollout by record status, as the live tally counted them."""
        counts: dict[str, int] = {}
        for state, n in (self.tally.counts if self.tally else {}).items():
            status = _TALLY_STATUS.get(state, "running")
            if n:
                counts[status] = counts.get(status, 0) + n
        return counts

    def _failed(self, exc: BaseException) -> None:
        """The first error that stopped the runner (a full disk, ...) is the result's."""
        if self.error is None:
            self.stopped = "error"
            self.error = describe(exc)

    def _event(self, kind: str, **fields: Any) -> None:
        """Record a batch event; one that cannot be written only marks the result."""
        try:
            self.store.event(kind, **fields)
        except Exception as exc:
            self._failed(exc)

    async def _close(self, stack: AsyncExitStack) -> None:
        """Stop the proxies, the live view and the runtime; a failure to stop is
        recorded, never allowed to lose the batch's result."""
        try:
            await stack.aclose()
        except Exception as exc:
            self.store.event("runtime_close_failed", error=f"{type(exc).__name__}: {exc}")

    async def _view(self, stack: AsyncExitStack, stream: IO[str] | None) -> None:
        if stream is None or self.tally is None:
            return
        from ._view import LiveView

        title = str(self.store.batch.get("name") or self.setup.batch_id)
        await stack.enter_async_context(LiveView(self.tally, stream=stream, title=title))

    async def _drain(self, work: WorkItems) -> None:
        """Every work item on the engine's pool, `max_concurrent` at a time; launching
        stops at the batch cost cap."""
        from ..engine import for_each

        if self.config.executor.kind == "ray":
            return await self._drain_on_ray(work)

        async def one(item: Work) -> None:
            await self._one(*item)

        await for_each(work, one, max_concurrent=self.config.max_concurrent, stop=self._capped)

    def _capped(self) -> bool:
        """Whether the batch cost cap is reached (recorded once, as the run's stop)."""
        if not self.setup.budget.reached:
            return False
        if self.stopped is None:
            self.stopped = "batch_cost_cap"
            self.store.event("cost_cap", spent=self.setup.budget.spent, cap=self.config.cost_cap)
        return True

    async def _drain_on_ray(self, items: WorkItems) -> None:
        """`executor = "ray"`: whole rollouts on Ray shards as ONE job across every agent
        (one `max_concurrent` bound), each recorded as it ends (phases are not streamed
        back; agents naming a model are refused by the plan)."""
        from ..engine import Planned, RayExecutor, RunSpec

        work = list(items)
        cfg = self.config.executor
        assert isinstance(cfg, RayExecutorConfig)
        setup = self.setup
        executor = RayExecutor(
            cfg.address, shards=cfg.shards, resources=cfg.resources, lease=cfg.lease or None
        )
        agents = {a.agent: setup.agents[a.agent] for a, _, _ in work}
        for agent in agents.values():
            _ship_by_value(agent)
        planned = [
            Planned(setup.task(a.task), _group(a), a.agent, f"{a.rollout_id}.{attempt}")
            for a, attempt, _ in work
        ]
        bound = self.config.max_concurrent
        spec = RunSpec(planned, agents, setup.runtime, setup.batch_id, self.timeouts, bound)
        ended: list[tuple[Assignment, Any]] = []

        def finished(i: int, run: Any) -> None:
            a, attempt, _ = work[i]
            assert self.tally is not None
            recording = Recording(run, self.store.begin(a, attempt=attempt), self.tally)
            self.tally.move("queued", "running")
            recording.state = "running"
            self._finished(a, run, recording, adopted=False)
            if self.groups is not None:  # held for their group rewards; else let go
                ended.append((a, run))

        await executor.run(spec, finished)
        for a, run in ended:  # the shards' runs, in the order they ended
            await self._grouped(a, run)

    async def _one(self, a: Assignment, attempt: int, adopted: dict[str, Any] | None) -> None:
        from ..agents import Run
        from ..engine import execute_run

        assert self.tally is not None
        setup = self.setup
        rec = self.store.begin(a, attempt=attempt)
        run = Run(
            setup.task(a.task),
            job_id=setup.batch_id,
            group_id=_group(a),
            trace_id=f"{a.rollout_id}.{attempt}",
        )
        recording = Recording(run, rec, self.tally, adoptable=setup.adoptable)
        adopt = None
        if adopted is not None:
            adopt = self._adoption(run, recording, adopted)
            gone = setup.gone(adopt.target)
            if gone is not None:  # recorded at once, not after a minute of connecting
                run.fail("connecting", SubstrateLost("connecting", gone))
                self._finished(a, run, recording, adopted=True)
                await self._grouped(a, run)  # its group's other members may wait on it
                return
            self.store.event("continued", id=a.rollout_id, attempt=attempt)
        else:
            self.tally.move("queued", "starting")
        with captured() as printed:
            try:
                await execute_run(
                    run,
                    setup.agents[a.agent],
                    runtime=setup.runtime,
                    timeout=self.timeouts,
                    proxy=setup.proxy_for(a.agent),
                    judge=setup.judge,
                    user=setup.user,
                    launch_retries=0 if adopt is not None else self.config.launch_retries,
                    adopt=adopt,
                    observers=(recording,),
                )
            except asyncio.CancelledError:
                _log_printed(rec, printed)
                recording.finish("interrupted")
                raise
        _log_printed(rec, printed)
        self._finished(a, run, recording, adopt is not None)
        await self._grouped(a, run)

    async def _grouped(self, a: Assignment, run: Any) -> None:
        """Group rewards and advantages once `run`'s group has ended (repeats >= 2)."""
        if self.groups is not None:
            await self.groups.ended(_group(a), a, run)

    def _earlier(self, work: WorkItems) -> Earlier:
        """The members of a group that ended before this runner, from their records."""
        here = {a.rollout_id for a, _, _ in work}
        named = {_group(a): (a.task, a.agent) for a, _, _ in work}

        def earlier(key: str) -> list[Member]:
            task, agent = named[key]
            members: list[Member] = []
            for row in list_rollouts(self.store.path, task=task, agent=agent, limit=None):
                if row["id"] not in here:
                    a = assignment_of(row)
                    record = read_rollout(self.store.path, a.rollout_id)["record"]
                    members.append((a, run_from_record(self.setup.task(task), key, record)))
            return members

        return earlier

    def _adoption(self, run: Any, recording: Recording, adopted: dict[str, Any]) -> Any:
        from ..engine import Adoption

        assert self.tally is not None
        session, checkpoint = adopted["session"], adopted["checkpoint"]
        run.restored = checkpoint
        recording.session = session
        recording.resume_turns()
        # the dead runner's turns of this rollout were spent, though no record says so yet
        self.setup.budget.spent += recording.base_cost or 0.0
        self.tally.move("queued", "running")
        recording.state = "running"
        target = self._target(adopted)
        return Adoption(
            target=target,
            token=self.setup.server_token(target),
            release=self.setup.release(target),
            died=self.setup.death(target),
            session_id=session["session_id"],
            resume_token=session["resume_token"],
            prompt=session.get("prompt"),
            start_result=session.get("start_result") or {},
        )

    def _target(self, adopted: dict[str, Any]) -> str:
        """Where the substrate of a rollout to continue serves."""
        target = adopted["session"].get("target") or self.config.runtime.url  # type: ignore[union-attr]
        return str(target)

    def _finished(self, a: Assignment, run: Any, recording: Recording, adopted: bool) -> None:
        status = "completed" if run.status == "completed" else "failed"
        lost = adopted and run.error is not None and run.error.phase == "connecting"
        if lost:  # the parked session expired or its server went away
            status = "interrupted"
        for launch, err in enumerate(run.launch_errors, 1):
            self.store.event(
                "launch_retry", id=a.rollout_id, attempt=launch, phase=err.phase,
                error=f"{err.type}: {err.message}",
            )  # fmt: skip
        recording.finish(status)
        self.ran += 1

    async def _reconcile(self) -> None:
        try:
            from ._reconcile import reconcile
        except ImportError:  # pragma: no cover - built alongside
            return
        try:
            report = await reconcile(self.store.path, final=True)
        except Exception as exc:
            self.store.event("reconcile_failed", error=f"{type(exc).__name__}: {exc}")
            return
        removed = report.get("removed") or {}
        if any(removed.values()) or report.get("errors"):
            self.store.event("reconciled", **report)

    def _result(self, wall: float) -> BatchResult:
        """The result from the index; when it cannot be read or flushed (a full disk),
        from the live tally, with the error that stopped it."""
        try:
            self.store.flush()
            counts = _counts(self.store.path)
            failures = list_rollouts(
                self.store.path, error_phase=["grading", "teardown"], limit=None
            )
            usd = self.setup.budget.spent if self.setup.proxies else spent(self.store.path)
        except Exception as exc:
            self._failed(exc)
            counts, failures = self._tallied(), []
            usd = self.setup.budget.spent
        return BatchResult(
            launched=True,
            output_dir=self.store.path,
            batch_id=self.setup.batch_id,
            counts=counts,
            ran=self.ran,
            evaluation_failed=sum(  # a reward that raised leaves its rollout `completed`;
                # one interrupted while grading is not a failed evaluation
                1
                for r in failures
                if r["error_phase"] == "grading" and r["status"] != "interrupted"
            ),
            teardown_errors=sum(1 for r in failures if r["error_phase"] == "teardown"),
            stopped=self.stopped,
            error=self.error,
            signal=received_signal() if self.stopped == "interrupted" else None,
            wall_s=wall,
            cost_usd=usd if usd else None,
        )


def _log_printed(rec: Any, printed: Printed) -> None:
    """Append what the rollout's agent printed to its `log.txt`."""
    text = printed.text()
    if text:
        rec.log(text)


def _group(a: Assignment) -> str:
    """A group: the repeats of one task by one agent entry (the runs' `group_id`)."""
    return f"{a.task}--{a.agent}"


def _ship_by_value(agent: Any) -> None:
    """Pickle a file-loaded agent's module by value: Ray workers cannot import it by
    name (it was loaded from a path, e.g. `agent.py:solve`)."""
    import sys

    import ray.cloudpickle

    module = sys.modules.get(getattr(agent, "__module__", "") or type(agent).__module__)
    if module is not None and module.__name__ not in ("builtins", "__main__"):
        spec = getattr(module, "__spec__", None)
        if spec is None or spec.origin is None or "site-packages" not in spec.origin:
            with contextlib.suppress(ValueError):  # already registered
                ray.cloudpickle.register_pickle_by_value(module)  # type: ignore[no-untyped-call]


def _counts(out: str) -> dict[str, int]:
    from ..store import count_rollouts

    return count_rollouts(out, by="status")


def _final_counts(out: str, again: dict[str, int]) -> dict[str, int]:
    """Ended rollouts by live-view state, less those about to get a new attempt."""
    counts = _counts(out)
    mapping = {"completed": "done", "failed": "failed", "interrupted": "interrupted"}
    ended = {mapping[s]: n - again.get(s, 0) for s, n in counts.items() if s in mapping}
    return {state: n for state, n in ended.items() if n > 0}
