"""The pool: many rollouts, at most `max_concurrent` at a time (`for_each`), and
`run_taskset`, a taskset's rows run on it locally or on Ray shards."""

from __future__ import annotations

import asyncio
import logging
import os
from collections.abc import Awaitable, Callable, Iterable, Sequence
from typing import TYPE_CHECKING, Any, Literal, TypeVar

from ..agents import Run
from ._drive import default_runtime, rollout
from ._groups import apply_group_rewards, check_group_rewards
from ._job import Job
from ._spec import Planned, RunSpec
from ._timeouts import Timeouts

if TYPE_CHECKING:
    from ..agents import Agent
    from ..proxy import InterceptionProxy, ModelLimits
    from ..records import Task
    from ..runtimes import RuntimeLike
    from ._ray_executor import RayExecutor

__all__ = ["for_each", "run_taskset"]

log = logging.getLogger("proctor.engine")

T = TypeVar("T")


async def for_each(
    items: Sequence[T],
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
) -> Job:
    """Run every task `group` times and return the `Job`; never raises for a rollout.

    Rows expand into `(task, group_id)` pairs (repeats of a row share a group id);
    placement is resolved once; at most `max_concurrent` rollouts run at a time. Runs
    land in `job.runs` in expansion order; `on_run` hears each as it finishes (before
    its group's rewards). With a `proxy`, each rollout gets its own session on it
    (budgets `limits`); with a `judge` proxy, each grading phase gets one on it.

    Once every rollout ended, each group's runs get the group rewards of their row's
    environment (`@env.group_reward`, found by name in this process) and, in a group
    of two or more, `run.advantage` (see `apply_group_rewards`).

    `executor="local"` runs every agent loop in this event loop; `"ray"` (or a
    `RayExecutor` for its options) runs them on Ray workers across a cluster, which
    need the agent and `runtime` to be picklable; `proxy` is not supported there.

    Raises:
        ValueError: a bad count or executor, a `proxy` or `judge` with
            `executor="ray"`, or a group smaller than 2 for a row whose environment
            has group rewards (before anything starts).
        RuntimeLaunchError: `executor="ray"` could not reach Ray or start a shard.
    """
    group = 1 if group is None else group
    if group < 1:
        raise ValueError("group must be >= 1")
    runner = _executor(executor, proxy, limits, judge)
    job = job if job is not None else Job(name or getattr(tasks, "name", ""), group=group)
    rows = list(tasks)
    check_group_rewards(rows, group)
    groups = [(task, os.urandom(16).hex()) for task in rows]
    planned = [Planned(task, gid) for task, gid in groups for _ in range(group)]
    spec = RunSpec(
        planned,
        {"": agent},
        runtime if runtime is not None else default_runtime(),
        job.id,
        Timeouts.of(rollout_timeout),
        max_concurrent,
    )
    results = _Results(len(planned), on_run)
    try:
        await runner.run(spec, results.finished)
    finally:
        runs = results.runs()
        job.runs.extend(runs)
    await apply_group_rewards(runs)
    return job


class _Results:
    """Runs by expansion index as they finish; `on_run` hears each one."""

    def __init__(self, size: int, on_run: Callable[[Run], Any] | None) -> None:
        self._runs: list[Run | None] = [None] * size
        self._on_run = on_run

    def finished(self, i: int, run: Run) -> None:
        self._runs[i] = run
        if self._on_run is not None:
            try:
                self._on_run(run)
            except Exception:  # a broken progress callback must not sink the batch
                log.exception("on_run callback failed for %s", run.slug)

    def runs(self) -> list[Run]:
        return [r for r in self._runs if r is not None]


class _LocalExecutor:
    """Every agent loop in this event loop, on the pool."""

    def __init__(
        self,
        proxy: InterceptionProxy | None,
        limits: ModelLimits | None,
        judge: InterceptionProxy | None,
    ) -> None:
        self.proxy = proxy
        self.limits = limits
        self.judge = judge

    async def run(self, spec: RunSpec, finished: Callable[[int, Run], None]) -> None:
        """Run every planned rollout; hand each `Run` to `finished` as it ends."""

        async def one(i: int) -> None:
            p = spec.rollouts[i]
            run = await rollout(
                p.task,
                spec.agents[p.agent],
                runtime=spec.runtime,
                job_id=spec.job_id,
                group_id=p.group_id,
                trace_id=p.trace_id,
                timeout=spec.timeouts,
                proxy=self.proxy,
                limits=self.limits,
                judge=self.judge,
            )
            finished(i, run)

        await for_each(range(len(spec.rollouts)), one, max_concurrent=spec.max_concurrent)


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
