"""`proctor run`'s rollouts: every (row, repeat) at most `--max-concurrent` at a time,
each recorded as it goes into the output folder (the batch layout) unless
`--no-record`, each finished run appended to `--output`, shown live on stderr. No run
is kept once written (the summary is counted as they end): memory stays flat however
many run."""

from __future__ import annotations

import contextlib
import os
import sys
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from ._common import CLIError, run_async
from ._run_rows import check_rows
from ._run_sources import open_runtime
from ._run_summary import Totals

if TYPE_CHECKING:
    from ..agents import Run
    from ..batch import Assignment
    from ..engine import Job, Planned
    from ..records import Task
    from ._run_plan import RunPlan

__all__ = ["Ended", "execute_plan"]


@dataclass(slots=True)
class Ended:
    """What ended, also when the run is interrupted: the job's statistics, totals by
    template (env and id), over how long, and the first error of each (phase, type),
    or every error with `every_error`, with its message and traceback."""

    every_error: bool = False
    job: Job | None = None
    wall: float = 0.0
    templates: dict[tuple[str, str], Totals] = field(default_factory=dict)
    errors: list[dict[str, Any]] = field(default_factory=list)
    seen: set[tuple[str, str]] = field(default_factory=set)

    def note(self, run: Run) -> None:
        """Count an ended run into the job and its template's totals (keeping nothing
        of it) and note its error."""
        assert self.job is not None
        self.job.add(run, keep="none")
        key = (run.task.env, run.task.id)
        totals = self.templates.get(key)
        if totals is None:
            totals = self.templates[key] = Totals()
        totals.add(run)
        err = run.error
        if err is None or (not self.every_error and (err.phase, err.type) in self.seen):
            return
        self.seen.add((err.phase, err.type))
        self.errors.append(
            {
                "slug": run.slug,
                "phase": err.phase,
                "type": err.type,
                "message": err.message,
                "traceback": err.traceback,
            }
        )


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
    from ..batch import RecordedRollouts
    from ..engine import Job, RunSpec

    await check_rows(plan)
    job = ended.job = Job(plan.taskset.name, group=plan.group)
    if plan.record is not None:
        job.id = plan.batch_id
    planned, assignments = _slots(plan)
    async with contextlib.AsyncExitStack() as stack:
        runtime = await stack.enter_async_context(open_runtime(plan.where))
        for proxy in (plan.proxy, plan.judge, plan.user):
            if proxy is not None:
                await stack.enter_async_context(proxy)
        spec = RunSpec(
            planned, {"": plan.agent}, runtime, job.id, plan.timeouts, plan.max_concurrent
        )

        def on_run(run: Run) -> None:
            ended.note(run)
            if writer is not None:
                writer(run)

        rollouts = RecordedRollouts(
            spec,
            assignments,
            output_dir=plan.record,
            meta=_meta(plan),
            secrets=[plan.where.token] if plan.where.token else [],
            proxy=plan.proxy,
            judge=plan.judge,
            user=plan.user,
            on_run=on_run,
            keep_runs=False,
        )
        if plan.record is not None:
            print(f"recording to {plan.record}", file=sys.stderr, flush=True)
        try:
            await rollouts.run(view=sys.stderr, title=plan.taskset.name)
        finally:
            ended.wall = rollouts.wall_s
    return job, ended.wall


def _slots(plan: RunPlan) -> tuple[Sequence[Planned], Sequence[Assignment]]:
    """Every (row, repeat) in run order (a row's repeats share a group), and the
    assignment its record gets; each made when asked for, so none lives for the run."""
    import uuid

    from ..batch import Assignment, rollout_id
    from ..engine import Planned, Repeats

    rows = [(task, uuid.uuid4().hex) for task in plan.taskset]

    def planned(row: tuple[Task, str], repeat: int) -> Planned:
        task, gid = row
        return Planned(task, gid, trace_id=f"{rollout_id(task.slug, 'agent', repeat)}.1")

    def assignment(row: tuple[Task, str], repeat: int) -> Assignment:
        slug = row[0].slug
        rid = rollout_id(slug, "agent", repeat)
        return Assignment(rid, slug, plan.agent_label, plan.model, repeat, enabled=True)

    return Repeats(rows, plan.group, planned), Repeats(rows, plan.group, assignment)


def _meta(plan: RunPlan) -> dict[str, Any]:
    """`batch.json` for a `proctor run`: what ran, where, with which agent and deadlines."""
    import platform
    from dataclasses import asdict

    from .. import __version__

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
    }


def _pricing(model: str | None) -> dict[str, Any]:
    if model is None:
        return {}
    from dataclasses import asdict

    from ..models import parse_model, price_of

    api_model = parse_model(model).model
    price = price_of(api_model)
    return {model: {"model": api_model, "price": None if price is None else asdict(price)}}


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
