"""`proctor run`'s rollouts: every (row, repeat) at most `--max-concurrent` at a time,
each recorded as it goes into the output folder (the batch layout) unless
`--no-record`, each finished run appended to `--output`, shown live on stderr."""

from __future__ import annotations

import contextlib
import os
import sys
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Protocol

from ._common import CLIError, run_async
from ._run_rows import check_rows
from ._run_sources import open_runtime

if TYPE_CHECKING:
    from ..agents import Run
    from ..batch import Assignment
    from ..batch._tally import Tally
    from ..engine import Job
    from ..records import Task
    from ..runtimes import RuntimeLike
    from ..store import BatchStore
    from ._run_plan import RunPlan

__all__ = ["Ended", "execute_plan"]


@dataclass(slots=True)
class Ended:
    """The runs that ended, and over how long, also when the run is interrupted."""

    job: Job | None = None
    wall: float = 0.0


@dataclass(slots=True)
class _Slot:
    """One rollout to run: a row, its group (the row's repeats share it), its id."""

    index: int
    task: Task
    group_id: str
    assignment: Assignment


def execute_plan(plan: RunPlan, ended: Ended) -> tuple[Job, float]:
    """Run the plan, recording each rollout (unless `--no-record`) and writing each
    finished run to `--output` (a new file) if given; `ended` holds what ended so far."""
    writer = _Writer(plan.output) if plan.output else None
    try:
        job, wall = run_async(_rollouts(plan, writer, ended), fast=True)
    except BaseException:
        if writer is not None:
            writer.close(keep_empty=False)  # a run that never started leaves no file
        raise
    if writer is not None:
        writer.close()
    return job, wall


async def _rollouts(plan: RunPlan, writer: _Writer | None, ended: Ended) -> tuple[Job, float]:
    from ..batch._tally import Tally
    from ..batch._view import LiveView
    from ..engine import Job

    await check_rows(plan)
    job = ended.job = Job(plan.taskset.name, group=plan.group)
    slots = _slots(plan)
    tally = Tally(len(slots))
    async with contextlib.AsyncExitStack() as stack:
        runtime = await stack.enter_async_context(open_runtime(plan.where))
        for proxy in (plan.proxy, plan.judge):
            if proxy is not None:
                await stack.enter_async_context(proxy)
        store = _open_store(plan, slots, stack)
        if store is not None:
            job.id = store.batch["batch_id"]
        await stack.enter_async_context(LiveView(tally, stream=sys.stderr, title=plan.taskset.name))
        runs: list[Run | None] = [None] * len(slots)
        tally.begin()
        try:
            await _drain(plan, slots, _Context(runtime, store, tally, job.id), runs, writer)
        finally:
            tally.end()  # the live view's last rate is the summary's
            wall = ended.wall = tally.snapshot()["elapsed_s"]
            job.runs.extend(r for r in runs if r is not None)
    return job, wall


def _slots(plan: RunPlan) -> list[_Slot]:
    """Every (row, repeat) in run order, with the rollout id its record gets."""
    import uuid

    from ..batch import Assignment, rollout_id

    slots: list[_Slot] = []
    for task in plan.taskset:
        gid = uuid.uuid4().hex
        for repeat in range(1, plan.group + 1):
            a = Assignment(
                rollout_id=rollout_id(task.slug, "agent", repeat),
                task=task.slug,
                agent=plan.agent_label,
                model=plan.model,
                repeat=repeat,
                enabled=True,
            )
            slots.append(_Slot(len(slots), task, gid, a))
    return slots


def _open_store(
    plan: RunPlan, slots: list[_Slot], stack: contextlib.AsyncExitStack
) -> BatchStore | None:
    """The record's output directory, made new (`BatchStore.create`), closed at exit."""
    if plan.record is None:
        return None
    from ..batch._setup import redactor
    from ..store import BatchStore

    store = BatchStore.create(plan.record, _meta(plan), redact=redactor(_secrets(plan)))
    stack.callback(store.close)
    store.add_assignments(s.assignment for s in slots)
    print(f"recording to {plan.record}", file=sys.stderr, flush=True)
    return store


def _meta(plan: RunPlan) -> dict[str, Any]:
    """`batch.json` for a `proctor run`: what ran, where, with which agent and deadlines."""
    import platform
    from dataclasses import asdict

    from .. import __version__
    from ..batch._execute import _runner

    return {
        "name": plan.taskset.name,
        "batch_id": plan.batch_id,
        "config": None,
        "command": {
            "kind": "proctor run",
            "source": plan.source,
            "env_source": plan.where.env_source,
            "runtime": plan.where.runtime,
            "agent": plan.agent_label,
            "model": plan.model,
            "group": plan.group,
            "max_concurrent": plan.max_concurrent,
            "timeouts": asdict(plan.timeouts),
        },
        "versions": {
            "proctor": __version__,
            "python": platform.python_version(),
            "environment": {"name": plan.where.env_name, "version": None},
        },
        "pricing": _pricing(plan.model),
        "runner": _runner(),
    }


def _pricing(model: str | None) -> dict[str, Any]:
    if model is None:
        return {}
    from dataclasses import asdict

    from ..models import parse_model, price_of

    api_model = parse_model(model).model
    price = price_of(api_model)
    return {model: {"model": api_model, "price": None if price is None else asdict(price)}}


def _secrets(plan: RunPlan) -> list[bytes]:
    """Values never to write: secret-looking variables, the model key, the token."""
    from ..batch._setup import _SECRET_NAME

    values = {v for k, v in os.environ.items() if _SECRET_NAME.search(k)}
    if plan.where.token:
        values.add(plan.where.token)
    return sorted((v.encode() for v in values if len(v) >= 8), key=len, reverse=True)


@dataclass(slots=True)
class _Context:
    """What every rollout of the run shares."""

    runtime: RuntimeLike
    store: BatchStore | None
    tally: Tally
    job_id: str


async def _drain(
    plan: RunPlan, slots: list[_Slot], ctx: _Context, runs: list[Run | None], writer: _Writer | None
) -> None:
    """Run every slot on the engine's pool, at most `max_concurrent` at a time; each
    lands in `runs`."""
    from ..batch._groups import GroupRewards, group_sizes
    from ..engine import for_each

    groups = None
    if plan.group >= 2:  # each group's rewards and advantages once all of it ended
        groups = GroupRewards(ctx.store, group_sizes(slot.group_id for slot in slots))

    async def one(slot: _Slot) -> None:
        run = runs[slot.index] = await _one(plan, slot, ctx)
        ended = [run]
        if groups is not None:
            ended = [r for _, r in await groups.ended(slot.group_id, slot.assignment, run)]
        if writer is not None:
            for r in ended:
                writer(r)

    try:
        await for_each(slots, one, max_concurrent=plan.max_concurrent)
    finally:  # an interrupted run still writes the runs of groups that never ended
        if groups is not None and writer is not None:
            for _, run in groups.unfinished():
                writer(run)


async def _one(plan: RunPlan, slot: _Slot, ctx: _Context) -> Run:
    """One rollout, recorded as it goes (phases, model turns, outcome)."""
    import asyncio

    from ..agents import Run
    from ..engine import execute_run

    rid = slot.assignment.rollout_id
    run = Run(slot.task, job_id=ctx.job_id, group_id=slot.group_id, trace_id=f"{rid}.1")
    track: _Tracker
    if ctx.store is not None:
        from ..batch._recording import Recording

        track = Recording(run, ctx.store.begin(slot.assignment), ctx.tally)
    else:
        track = _Counted(run, ctx.tally)
    ctx.tally.move("queued", "starting")
    try:
        await execute_run(
            run,
            plan.agent,
            runtime=ctx.runtime,
            timeout=plan.timeouts,
            proxy=plan.proxy,
            judge=plan.judge,
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
    """The live view's counts for a rollout that is not recorded (`--no-record`)."""

    def __init__(self, run: Run, tally: Tally) -> None:
        self.run = run
        self.tally = tally
        self.state = "starting"

    def phase_changed(self, run: Run, phase: str) -> None:
        from ..batch._recording import state_of

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


class _Writer:
    """Append one JSON line per finished run, flushed, so a crash keeps what ran.

    The file must be new (`x` mode): a second run never mixes its rows into the first.
    """

    def __init__(self, path: str) -> None:
        import orjson

        try:
            self.file = open(path, "xb")  # noqa: SIM115 - closed by close()
        except FileExistsError:
            raise CLIError(f"{path} already exists; --output writes a new file") from None
        self.path = path
        self.rows = 0
        self.dumps = orjson.dumps
        self.option = orjson.OPT_NON_STR_KEYS

    def __call__(self, run: Run) -> None:
        # One write per line: a reader (or a crash) never sees half a row.
        self.file.write(self.dumps(run.to_dict(), default=str, option=self.option) + b"\n")
        self.file.flush()
        self.rows += 1

    def close(self, *, keep_empty: bool = True) -> None:
        self.file.close()
        if not keep_empty and not self.rows:
            with contextlib.suppress(OSError):
                os.unlink(self.path)
