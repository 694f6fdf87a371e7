"""`RayExecutor`: a taskset's agent loops spread over a Ray cluster.

Ray is imported only when a job runs; install it with `pip install 'proctor[ray]'`.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import itertools
import logging
import time
import uuid
import warnings
from collections.abc import AsyncIterator, Callable, Iterator, Mapping
from typing import TYPE_CHECKING, Any

from .._errors import RolloutError, RuntimeLaunchError, WorkerLost
from ..agents import Run
from ..runtimes._ray import actor_namespace, connect_ray, placement
from ._drive import execute_run
from ._ray_lease import SHARD_PREFIX, RayLease, keeper_watch
from ._spec import Planned, RunSpec
from ._timeouts import Timeouts

if TYPE_CHECKING:
    from ray.actor import ActorHandle

    from ..agents import Agent
    from ..runtimes import RuntimeLike

__all__ = ["RayExecutor", "WorkerLost"]

log = logging.getLogger("proctor.engine.ray")

_CLOSE = 30.0  # seconds a shard gets to tear its rollouts and runtime down at the end
_BOOK = "proctor/phase/"  # GCS key prefix of the phases `settle=0` records; a job's own follows


class RayExecutor:
    """Run a job's rollouts, agent loops included, on Ray actors across a cluster.

    Each shard is an async actor holding the job's agents and the runtime (shipped
    once, pickled). It runs whole rollouts (provision, agent, grade, teardown), at most
    the job's `max_concurrent` in flight across every shard and agent, each shard its
    even share of them, streaming back
    each phase once it has lasted `settle` seconds
    (with `settle=0`, recording each in the cluster's GCS before entering it), then
    the `Run`, so runs reach the driver's job as they finish. A shard takes a new
    rollout only when one of its own ends; when a shard dies, the rollouts it had in
    flight fail with `WorkerLost` in the last phase it reported, and the rest of the
    job goes on on the shards left. A runtime that is an async context manager is entered once per
    shard for the whole job (a warm pool per node, say).

    With a `lease`, the shards are detached actors named in the job's namespace
    (`actor_namespace(job_id)`) under a lease this process renews (`_ray_lease`): if
    it is killed, they go on with their rollouts for `lease` seconds, and a later run
    of the same job (same rollout trace ids) within that time follows those rollouts
    to their end instead of starting them again; then everything in the namespace is
    killed. Without one, the shards die with this process's Ray job.

    Args:
        address: the cluster, when this process is not connected yet
            (`ray.init(address=...)`; None: `RAY_ADDRESS` or Ray's own lookup).
        shards: how many shard actors (default: one per live node that can hold one),
            assigned to those nodes in turn.
        concurrency: deprecated and ignored: the job's `max_concurrent` bounds the
            rollouts in flight across every shard.
        resources: what each shard reserves, keyed as in `RayRuntime` (default: no
            CPU, so shards never crowd out the environments' own actors).
        startup_timeout: seconds for the shards to be placed and ready.
        settle: seconds a phase must last before its shard reports it; a worker that
            dies sooner after a change is reported in the phase before. 0 makes phases
            exact: the shard writes each change to the GCS and waits for its answer
            before the rollout goes on (a round trip of about 1 ms that stalls the
            shard's other rollouts; a fast rollout has five changes), and the driver
            reads it only when a worker dies.
        lease: seconds the shards outlive this process (None: they die with it).

    Raises:
        ValueError: a count is below 1, `settle` is negative, `lease` is not
            positive, or `resources` is malformed.
    """

    def __init__(
        self,
        address: str | None = None,
        *,
        shards: int | None = None,
        concurrency: int | None = None,
        resources: Mapping[str, Any] | None = None,
        startup_timeout: float = 60.0,
        settle: float = 0.05,
        lease: float | None = None,
    ) -> None:
        if shards is not None and shards < 1:
            raise ValueError("shards must be >= 1")
        if concurrency is not None:
            if concurrency < 1:
                raise ValueError("concurrency must be >= 1")
            warnings.warn(
                "RayExecutor(concurrency=) is deprecated and ignored: the job's "
                "max_concurrent bounds the rollouts in flight across every shard",
                DeprecationWarning,
                stacklevel=2,
            )
        if not settle >= 0:
            raise ValueError("settle must be >= 0 seconds")
        if lease is not None and not lease > 0:
            raise ValueError("lease must be > 0 seconds (None: no lease)")
        self.lease = lease
        self.address = address
        self.shards = shards
        self.options = {"num_cpus": 0, **placement(resources or {})}
        self.startup_timeout = startup_timeout
        self.settle = settle

    def __repr__(self) -> str:
        return f"RayExecutor(address={self.address!r}, shards={self.shards})"

    async def run(self, spec: RunSpec, finished: Callable[[int, Run], None]) -> None:
        """Run every planned rollout, at most `spec.max_concurrent` in flight across
        every shard; hand each `Run` to `finished` as it ends.

        Raises:
            RuntimeLaunchError: Ray cannot be reached, an agent or the runtime cannot
                be pickled, or no shard came up in time.
        """
        if not spec.rollouts:
            return
        await connect_ray(self.address)
        book = _PhaseBook(f"{_BOOK}{uuid.uuid4().hex}/") if self.settle == 0 else None
        lease = None if self.lease is None else RayLease(actor_namespace(spec.job_id), self.lease)
        held: dict[str, ActorHandle[Any]] = {}
        try:
            if lease is not None:
                held = await lease.take()
            shards = await self._start(spec, book, lease)
        except BaseException:
            if lease is not None:
                await asyncio.shield(lease.end(held))
            raise
        try:
            cursor = iter([(i, p) for i, p in enumerate(spec.rollouts) if p.trace_id not in held])
            limit = asyncio.Semaphore(spec.width)  # one bound across shards and agents
            share = -(-spec.width // len(shards))  # and each shard its even part of it
            async with asyncio.TaskGroup() as tg:
                for i, p in enumerate(spec.rollouts):  # a dead driver's, still held
                    if p.trace_id in held:
                        old = _Shard(held[p.trace_id], book, leased=True)
                        tg.create_task(old.follow(i, p, limit, spec.job_id, finished))
                for _ in range(share):
                    for shard in shards:  # interleaved: the semaphore serves them in turn
                        tg.create_task(shard.work(cursor, limit, spec.job_id, finished))
            for i, p in cursor:  # every shard died before these began
                lost = WorkerLost("every Ray shard died before it began")
                finished(i, _failed(p, spec.job_id, uuid.uuid4().hex, "provisioning", lost))
        finally:
            await asyncio.shield(asyncio.gather(*(s.close() for s in shards)))
            if lease is not None:
                await asyncio.shield(lease.end(held))
            if book is not None:
                book.forget()

    async def _start(
        self, spec: RunSpec, book: _PhaseBook | None, lease: RayLease | None
    ) -> list[_Shard]:
        import ray

        agents = {p.agent: spec.agents[p.agent] for p in spec.rollouts}
        try:
            cargo = ray.put((agents, spec.runtime, spec.timeouts, self.settle, book))
        except Exception as exc:  # Ray wraps pickling failures in several types
            raise RuntimeLaunchError(
                f"cannot ship the agents and runtime to Ray workers (they must pickle): {exc}"
            ) from exc
        nodes = self._nodes()
        count = self.shards or len(nodes)
        places = itertools.islice(itertools.cycle(nodes), count)
        shards = [self._shard(node, cargo, book, spec.width, lease) for node in places]
        opening: dict[asyncio.Future[None], _Shard] = {
            asyncio.ensure_future(s.handle.open.remote()): s for s in shards
        }
        try:
            await asyncio.wait(opening, timeout=self.startup_timeout)
        except BaseException:
            await asyncio.shield(asyncio.gather(*(s.close() for s in shards)))
            raise
        finally:
            for fut in opening:
                fut.cancel()
        up = [s for f, s in opening.items() if not f.cancelled() and f.exception() is None]
        await asyncio.shield(asyncio.gather(*(s.close() for s in shards if s not in up)))
        if not up:
            why = next((f.exception() for f in opening if not f.cancelled()), None)
            raise RuntimeLaunchError(
                f"{self!r}: no shard came up within {self.startup_timeout:g}s "
                f"(options {self.options}): {why or 'none was placed'}"
            )
        if len(up) < count:
            log.warning("%r: %d of %d shards came up", self, len(up), count)
        return up

    def _shard(
        self, node: str, cargo: Any, book: _PhaseBook | None, width: int, lease: RayLease | None
    ) -> _Shard:
        from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

        options = {**self.options, "max_concurrency": width + 2}  # + `close`, `ack`
        if lease is not None:
            name = f"{SHARD_PREFIX}{uuid.uuid4().hex[:16]}"
            options.update(name=name, namespace=lease.namespace, lifetime="detached")
        strategy = NodeAffinitySchedulingStrategy(node, soft=False)
        actor = _shard_actor().options(scheduling_strategy=strategy, **options)
        namespace = None if lease is None else lease.namespace
        return _Shard(actor.remote(cargo, namespace), book, leased=lease is not None)

    def _nodes(self) -> list[str]:
        """Ids of the live nodes big enough for a shard.

        Raises:
            RuntimeLaunchError: there is none.
        """
        import ray

        opts = self.options
        need = {
            "CPU": opts.get("num_cpus", 0),
            "GPU": opts.get("num_gpus", 0),
            "memory": opts.get("memory", 0),
            **opts.get("resources", {}),
        }
        nodes = [
            str(n["NodeID"])
            for n in ray.nodes()  # type: ignore[no-untyped-call]
            if n.get("Alive") and all(n["Resources"].get(k, 0) >= v for k, v in need.items())
        ]
        if not nodes:
            raise RuntimeLaunchError(f"{self!r}: no live node can hold a shard ({self.options})")
        return nodes


class _Shard:
    """The driver's side of one shard actor: feeds it rollouts while it lives.

    With a `book` (what `settle=0` records), a lost rollout's phase is the one its
    shard last recorded there, not the last one streamed back. A `leased` shard keeps
    each run until told it was taken (`ack`), for a later driver if this one dies.
    """

    def __init__(
        self, handle: ActorHandle[Any], book: _PhaseBook | None, *, leased: bool = False
    ) -> None:
        self.handle = handle
        self.book = book
        self.leased = leased
        self.alive = True

    async def work(
        self,
        cursor: Iterator[tuple[int, Planned]],
        limit: asyncio.Semaphore,
        job_id: str,
        finished: Callable[[int, Run], None],
    ) -> None:
        """Take the next rollout while this shard lives; report each run as it ends."""
        while True:
            async with limit:
                item = next(cursor, None) if self.alive else None
                if item is None:
                    return
                i, planned = item
                run = await self.rollout(planned, job_id)
            self.taken(i, run, finished)

    async def follow(
        self,
        i: int,
        planned: Planned,
        limit: asyncio.Semaphore,
        job_id: str,
        finished: Callable[[int, Run], None],
    ) -> None:
        """Follow a rollout a dead driver started on this shard to its end."""
        async with limit:
            run = await self.rollout(planned, job_id, adopted=True)
        self.taken(i, run, finished)

    def taken(self, i: int, run: Run, finished: Callable[[int, Run], None]) -> None:
        """Hand the run on; then a leased shard may let go of it."""
        finished(i, run)
        if self.leased and self.alive:
            self.handle.ack.remote(run.trace_id)

    async def rollout(self, planned: Planned, job_id: str, *, adopted: bool = False) -> Run:
        """One rollout on the shard (`adopted`: one it already runs); a failed `Run`
        if the shard dies under it."""
        from ray.exceptions import RayActorError, RayError, RayTaskError

        trace_id = planned.trace_id or uuid.uuid4().hex
        started = time.time()
        phase = "agent" if adopted else "provisioning"
        if adopted:
            stream: Any = self.handle.follow.remote(trace_id)
        else:
            stream = self.handle.rollout.remote(planned, job_id, trace_id)
        try:
            async for ref in stream:
                item = await ref
                if isinstance(item, Run):
                    return item
                phase = item
        except asyncio.CancelledError:
            _cancel(stream)
            raise
        except RayActorError as exc:
            self.alive = False
            if self.book is not None:
                phase = self.book.read(trace_id) or phase
            lost = WorkerLost(f"the Ray worker running it died: {str(exc).splitlines()[0]}")
            return _failed(planned, job_id, trace_id, phase, lost, started)
        except RayError as exc:  # e.g. the run would not pickle (a lock in its trace)
            cause = exc.cause if isinstance(exc, RayTaskError) and exc.cause else exc
            why = f"{type(cause).__name__}: {str(cause).splitlines()[0]}"
            broken = RolloutError(f"the shard could not send the run back: {why}")
            return _failed(planned, job_id, trace_id, phase, broken, started)
        raise RolloutError(f"{planned.task.slug}: the shard ended the rollout without its run")

    async def close(self) -> None:
        """Let the shard cancel what it runs and leave its runtime, then kill it."""
        import ray

        try:
            async with asyncio.timeout(_CLOSE):
                await self.handle.close.remote()
        except Exception as exc:
            log.debug("shard %s did not close cleanly: %r", self.handle, exc)
        finally:
            ray.kill(self.handle, no_restart=True)


def _cancel(stream: Any) -> None:
    import ray

    with contextlib.suppress(Exception):  # already finished or its shard is gone
        ray.cancel(stream)


def _failed(
    planned: Planned,
    job_id: str,
    trace_id: str,
    phase: str,
    error: BaseException,
    started: float | None = None,
) -> Run:
    """The record of a rollout that failed out of the shard's reach."""
    run = Run(planned.task, job_id=job_id, group_id=planned.group_id, trace_id=trace_id)
    if started is not None:
        run.started_at = started
    run.fail(phase, error)
    run.ended_at = time.time()
    return run


# -- inside the shard actor ----------------------------------------------------------------


class _Reporter:
    """Reports each phase of a shard's rollout before the run enters it (an observer)."""

    __slots__ = ("notify",)

    def __init__(self, notify: Callable[[str], None]) -> None:
        self.notify = notify

    def phase_changed(self, run: Run, phase: str) -> None:
        self.notify(phase)  # if reporting fails, the run fails in the phase it was in


class _ShardActor:
    """Runs whole rollouts in a Ray worker; the driver's `_Shard` talks to it."""

    def __init__(
        self,
        cargo: tuple[Mapping[str, Agent], RuntimeLike, Timeouts, float, _PhaseBook | None],
        namespace: str | None = None,
    ) -> None:
        self.agents, self.runtime, self.timeout, self.settle, self.book = cargo
        self.entered = False
        self.running: set[asyncio.Task[Run]] = set()
        self.namespace = namespace  # under a lease: its rollouts kept until taken
        self.kept: dict[str, asyncio.Task[Run]] = {}
        self.watch: asyncio.Task[None] | None = None

    async def open(self) -> None:
        """Enter the runtime when it is an async context manager; under a lease,
        watch its keeper (this worker exits once it is gone)."""
        if self.namespace is not None:
            self.watch = asyncio.get_running_loop().create_task(keeper_watch(self.namespace))
        enter = getattr(self.runtime, "__aenter__", None)
        if enter is not None:
            await enter()
            self.entered = True

    async def holds(self) -> list[str]:
        """The trace ids of the rollouts kept here (running, or ended and not taken)."""
        return list(self.kept)

    async def follow(self, trace_id: str) -> AsyncIterator[str | Run]:
        """A kept rollout's `Run` once it ends (for a driver that took the lease)."""
        work = self.kept.get(trace_id)
        if work is None:
            raise LookupError(f"{trace_id}: no such rollout kept on this shard")
        yield await asyncio.shield(work)

    async def ack(self, trace_id: str) -> None:
        """The driver has the rollout's run: let go of it."""
        self.kept.pop(trace_id, None)

    async def rollout(
        self, planned: Planned, job_id: str, trace_id: str
    ) -> AsyncIterator[str | Run]:
        """Yield the rollout's phases that last (see `_settled`), then its `Run`.

        With a book, each phase is recorded there instead, before the run enters it.
        """
        phases: asyncio.Queue[str | None] = asyncio.Queue()
        book = self.book
        notify = phases.put_nowait if book is None else functools.partial(book.write, trace_id)
        run = Run(planned.task, job_id=job_id, group_id=planned.group_id, trace_id=trace_id)
        agent, observers = self.agents[planned.agent], (_Reporter(notify),)
        work = asyncio.create_task(
            execute_run(run, agent, runtime=self.runtime, timeout=self.timeout, observers=observers)
        )
        self.running.add(work)
        if self.namespace is not None:
            self.kept[trace_id] = work
        work.add_done_callback(lambda _: phases.put_nowait(None))
        try:
            if book is None:
                async for phase in _settled(phases, self.settle):
                    yield phase
            yield await work
        finally:
            self.running.discard(work)
            if not work.done():
                work.cancel()
                await asyncio.wait([work])

    async def close(self) -> None:
        """Cancel what still runs (each tears down), then leave the runtime."""
        for work in self.running:
            work.cancel()
        if self.running:
            await asyncio.wait(self.running)
        if self.entered:
            self.entered = False
            await self.runtime.__aexit__(None, None, None)  # type: ignore[union-attr]


async def _settled(phases: asyncio.Queue[str | None], settle: float) -> AsyncIterator[str]:
    """Each phase once it has lasted `settle` seconds, until the None that ends a run.

    A dying worker is found mid-phase in the long phases; the short ones (all of them,
    in a fast rollout) are not worth a message to the driver each.
    """
    pending: str | None = None
    while True:
        try:
            async with asyncio.timeout(None if pending is None else settle):
                phase = await phases.get()
        except TimeoutError:
            if pending is not None:
                yield pending
            pending = None
            continue
        if phase is None:
            return
        pending = phase


class _PhaseBook:
    """The phases of a `settle=0` job's rollouts, kept in the cluster's GCS under a
    prefix of the job's own: a shard writes each before its run enters it; the driver
    reads a rollout's when its worker died, and forgets them all when the job ends."""

    def __init__(self, prefix: str) -> None:
        self.prefix = prefix

    def write(self, trace_id: str, phase: str) -> None:
        """Store `phase` as the rollout's; returns once the GCS has it."""
        from ray.experimental import internal_kv

        internal_kv._internal_kv_put(self.prefix + trace_id, phase)

    def read(self, trace_id: str) -> str | None:
        from ray.experimental import internal_kv

        value = internal_kv._internal_kv_get(self.prefix + trace_id)
        return None if value is None else value.decode()

    def forget(self) -> None:
        from ray.experimental import internal_kv

        try:  # from a `finally`: must not hide why the job ended
            internal_kv._internal_kv_del(self.prefix, del_by_prefix=True)
        except Exception as exc:
            log.debug("could not drop the recorded phases %s: %r", self.prefix, exc)


@functools.cache
def _shard_actor() -> Any:
    import ray

    return ray.remote(_ShardActor)
