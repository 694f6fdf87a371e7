"""The pool: many rollouts, at most `max_concurrent` at a time (`for_each`), and
`run_taskset`, a taskset's rows run on it locally or on Ray shards."""

from __future__ import annotations

import asyncio
import contextlib
import os
from collections.abc import Awaitable, Callable, Iterable, Iterator
from typing import TYPE_CHECKING, Any, Literal, Protocol, TypeVar

from ..agents import Run
from ._collect import Collector, SinkLike, sink_call
from ._drive import default_runtime, execute_run
from ._groups import check_group_rewards
from ._job import Job, Keep
from ._spec import Planned, Repeats, RunSpec
from ._timeouts import Timeouts

if TYPE_CHECKING:
    from ..agents import Agent
    from ..proxy import InterceptionProxy, ModelLimits
    from ..records import Task
    from ..runtimes import RuntimeLike
    from ._ray_executor import RayExecutor

__all__ = ["for_each", "run_taskset"]

T = TypeVar("T")
T_co = TypeVar("T_co", covariant=True)


class Items(Protocol[T_co]):
    """What `for_each` runs over: anything sized and iterable (a list, a lazy view)."""

    def __len__(self) -> int: ...

    def __iter__(self) -> Iterator[T_co]: ...


async def for_each(
    items: Items[T],
    work: Callable[[T], Awaitable[None]],
    *,
    max_concurrent: int | None,
    stop: Callable[[], bool] | None = None,
) -> None:
    """Await `work(item)` for each item, in order, at most `max_concurrent` at a time
    (None: all at once). Once `stop()` is true, items not yet begun are left alone.

    Raises:
        ValueError: `max_concurrent` below 1.
        ExceptionGroup: what `work` raised (the other items are cancelled).
    """
    if max_concurrent is not None and max_concurrent < 1:
        raise ValueError("max_concurrent must be >= 1")
    cursor = iter(items)

    async def worker() -> None:
        for item in cursor:
            if stop is not None and stop():
                return
            await work(item)

    async with asyncio.TaskGroup() as tg:
        for _ in range(min(max_concurrent or len(items), len(items))):
            tg.create_task(worker())


async def run_taskset(
    tasks: Iterable[Task],
    agent: Agent,
    *,
    runtime: RuntimeLike | None = None,
    group: int | None = 1,
    max_concurrent: int | None = None,
    job: Job | None = None,
    rollout_timeout: Timeouts | float | None = None,
    on_run: Callable[[Run], Any] | None = None,
    name: str = "",
    proxy: InterceptionProxy | None = None,
    limits: ModelLimits | None = None,
    executor: Literal["local", "ray"] | RayExecutor = "local",
    judge: InterceptionProxy | None = None,
    keep: Keep = "runs",
    sink: SinkLike | None = None,
) -> Job:
    """Run every task `group` times and return the `Job`; never raises for a rollout.

    Rows expand into `(task, group_id)` pairs (repeats of a row share a group id);
    placement is resolved once; at most `max_concurrent` rollouts run at a time.
    `on_run` hears each run as it finishes (before its group's rewards). With a
    `proxy`, each rollout gets its own session on it (budgets `limits`); with a
    `judge` proxy, each grading phase gets one on it.

    Once every rollout of a group ended, its runs get the group rewards of their row's
    environment (`@env.group_reward`, found by name in this process) and, in a group
    of two or more, `run.advantage` (see `apply_group_rewards`). Then each run is
    counted into `job.stats`, kept as `keep` says and handed to `sink` (a `RunSink`,
    or a callable, sync or async). `keep="runs"` keeps the run in `job.runs` and a
    `RunSummary` in `job.summaries` (both in expansion order); `"summaries"` the
    summary only (a few hundred bytes a run); `"none"` nothing: a run the sink has
    taken is let go, so memory stays flat however many rollouts run. `"runs"` is the
    default because small interactive jobs are read run by run (traces, grades); a
    kept run holds its trace, a few KB at least. A sink that raises stops the job: nothing more is
    started (with the local executor), and its error is raised once the rollouts in
    flight ended. After an interrupt or a failure, the runs of groups not settled yet
    still reach the job and the sink, without group rewards.

    `executor="local"` runs every agent loop in this event loop; `"ray"` (or a
    `RayExecutor` for its options) runs them on Ray workers across a cluster, which
    need the agent and `runtime` to be picklable; `proxy` is not supported there.

    Raises:
        ValueError: a bad count, `keep` or executor, a `proxy` or `judge` with
            `executor="ray"`, or a group smaller than 2 for a row whose environment
            has group rewards (before anything starts).
        TypeError: `sink` is neither callable nor has an `add(run)` method.
        RuntimeLaunchError: `executor="ray"` could not reach Ray or start a shard.
        Exception: what the sink raised.
    """
    group = 1 if group is None else group
    if group < 1:
        raise ValueError("group must be >= 1")
    if keep not in ("runs", "summaries", "none"):
        raise ValueError(f"keep must be 'runs', 'summaries' or 'none', not {keep!r}")
    give = sink_call(sink)
    runner = _executor(executor, proxy, limits, judge)
    job = job if job is not None else Job(name or getattr(tasks, "name", ""), group=group)
    rows = list(tasks)
    check_group_rewards(rows, group)
    planned = _Expansion([(task, os.urandom(16).hex()) for task in rows], group)
    spec = RunSpec(
        planned,
        {"": agent},
        runtime if runtime is not None else default_runtime(),
        job.id,
        Timeouts.of(rollout_timeout),
        max_concurrent,
    )
    collector = Collector(job, len(planned), group, keep=keep, on_run=on_run, sink=give)
    if isinstance(runner, _LocalExecutor):
        runner.stop = lambda: collector.broken
    await _collected(runner, spec, collector)
    return job


async def _collected(
    runner: _LocalExecutor | RayExecutor, spec: RunSpec, collector: Collector
) -> None:
    """Run `spec` with `collector` draining beside it; fill the job, also on a failure."""
    drain = asyncio.create_task(collector.drain())
    try:
        try:
            await runner.run(spec, collector.finished)
        finally:
            collector.close()
        await drain
    finally:
        if not drain.done():  # interrupted (or the executor failed): stop settling
            drain.cancel()
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await drain
        await collector.give_up()
        collector.fill()


class _Expansion(Repeats[tuple["Task", str], Planned]):
    """Each row's rollouts, `group` in a row sharing the row's group id, made on
    demand: a `Planned` per rollout need not live for the whole job."""

    def __init__(self, rows: list[tuple[Task, str]], group: int) -> None:
        super().__init__(rows, group, _planned)


def _planned(row: tuple[Task, str], repeat: int) -> Planned:
    return Planned(*row)


class _LocalExecutor:
    """Every agent loop in this event loop, on the pool; once `stop()` is true, no
    more rollouts start."""

    def __init__(
        self,
        proxy: InterceptionProxy | None,
        limits: ModelLimits | None,
        judge: InterceptionProxy | None,
    ) -> None:
        self.proxy = proxy
        self.limits = limits
        self.judge = judge
        self.stop: Callable[[], bool] | None = None

    async def run(self, spec: RunSpec, finished: Callable[[int, Run], None]) -> None:
        """Run every planned rollout (`run_taskset`'s expansion); hand each `Run` to
        `finished` as it ends."""
        planned = spec.rollouts
        assert isinstance(planned, _Expansion)
        rows, group, agent, job_id = planned.rows, planned.group, spec.agents[""], spec.job_id
        runtime, timeouts = spec.runtime, spec.timeouts
        proxy, limits, judge = self.proxy, self.limits, self.judge

        async def one(i: int) -> None:  # `rollout()` inline: a frame fewer per resume
            task, gid = rows[i // group]  # no `Planned` made
            run = Run(task, job_id=job_id, group_id=gid)
            await execute_run(
                run,
                agent,
                runtime=runtime,
                timeout=timeouts,
                proxy=proxy,
                limits=limits,
                judge=judge,
            )
            finished(i, run)

        await for_each(
            range(len(spec.rollouts)), one, max_concurrent=spec.max_concurrent, stop=self.stop
        )


def _executor(
    executor: object,
    proxy: InterceptionProxy | None,
    limits: ModelLimits | None,
    judge: InterceptionProxy | None,
) -> _LocalExecutor | RayExecutor:
    """The executor to run on: local (this event loop) or a `RayExecutor`."""
    if executor == "local":
        return _LocalExecutor(proxy, limits, judge)
    from ._ray_executor import RayExecutor

    if executor == "ray":
        executor = RayExecutor()
    if not isinstance(executor, RayExecutor):
        raise ValueError(f"executor must be 'local', 'ray' or a RayExecutor, not {executor!r}")
    if proxy is not None:
        raise ValueError("proxy= serves agents in this process; executor='ray' cannot use it")
    if judge is not None:
        raise ValueError("judge= serves graders in this process; executor='ray' cannot use it")
    return executor
