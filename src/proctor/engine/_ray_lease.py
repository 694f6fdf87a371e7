"""A Ray job's lease: its shard actors outlive the driver for a bounded grace.

With a lease (`RayExecutor(lease=...)`), a job's shards are detached actors named in
the job's namespace (`runtimes.actor_namespace(job_id)`), beside one lease keeper
actor. The driver renews the lease while it runs; a driver killed -9 renews nothing,
and once `grace` seconds pass without a renewal the keeper kills every actor named in
the namespace (the shards, and the environment actors they started), then itself.
Each shard watches the keeper and exits when it is gone, so nothing outlives a keeper
that died either. A driver that takes the lease within the grace finds the shards'
rollouts (`held`) and follows them to their end instead of starting them again.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import logging
import os
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from ray.actor import ActorHandle

__all__ = ["KEEPER", "SHARD_PREFIX", "RayLease", "keeper_watch"]

log = logging.getLogger("proctor.engine.ray")

KEEPER = "lease"  # the keeper's name in the job's namespace
SHARD_PREFIX = "shard-"  # a shard's name: this, then a random hex id
_WATCH = 1.0  # seconds between a shard's looks at its keeper


class _LeaseKeeper:
    """Kills every actor named in its namespace once nobody renewed the lease for
    `grace` seconds (or the job closes it), then exits."""

    def __init__(self, namespace: str) -> None:
        self.namespace = namespace
        self.lapse: asyncio.TimerHandle | None = None

    async def renew(self, grace: float) -> None:
        """A driver holds the lease for `grace` seconds more."""
        if self.lapse is not None:
            self.lapse.cancel()
        self.lapse = asyncio.get_running_loop().call_later(grace, self._lapsed)

    async def ping(self) -> bool:
        return True

    async def close(self) -> None:
        """The job is over: everything goes now."""
        self._end()

    def _lapsed(self) -> None:
        log.warning("the lease of %s lapsed: killing its actors", self.namespace)
        self._end()

    def _end(self) -> None:
        import ray

        for actor in ray.util.list_named_actors(all_namespaces=True):
            if actor["namespace"] == self.namespace and actor["name"] != KEEPER:
                with contextlib.suppress(Exception):  # already gone
                    ray.kill(ray.get_actor(actor["name"], namespace=self.namespace))
        os._exit(0)  # a detached actor that exits is not restarted (max_restarts 0)


@functools.cache
def _keeper_actor() -> Any:
    import ray

    return ray.remote(_LeaseKeeper)


class RayLease:
    """The driver's side of a job's lease: taken before the shards start, renewed
    while the job runs, ended (everything in the namespace killed) when it ends."""

    def __init__(self, namespace: str, grace: float) -> None:
        self.namespace = namespace
        self.grace = grace
        self.keeper: ActorHandle[Any] | None = None
        self.renewal: asyncio.Task[None] | None = None

    async def take(self) -> dict[str, ActorHandle[Any]]:
        """Take the lease; returns the rollouts a dead driver's shards still hold."""
        self.keeper = await take_lease(self.namespace, self.grace)
        self.renewal = asyncio.ensure_future(renewing(self.keeper, self.grace))
        return await held_runs(self.namespace)

    async def end(self, held: dict[str, ActorHandle[Any]]) -> None:
        """Stop renewing; kill the dead driver's shards and, through the keeper, what
        else the namespace holds. Never raises."""
        import ray

        if self.renewal is not None:
            self.renewal.cancel()
        for shard in {id(s): s for s in held.values()}.values():
            with contextlib.suppress(Exception):
                ray.kill(shard, no_restart=True)
        if self.keeper is not None:
            with contextlib.suppress(Exception):  # it exits as it answers
                await asyncio.wait_for(self.keeper.close.remote(), 30)


async def take_lease(namespace: str, grace: float) -> ActorHandle[Any]:
    """The namespace's keeper (made if none runs), its lease renewed for `grace`."""
    options = {"name": KEEPER, "namespace": namespace, "lifetime": "detached", "num_cpus": 0}
    keeper: ActorHandle[Any] = (
        _keeper_actor().options(get_if_exists=True, **options).remote(namespace)
    )
    await keeper.renew.remote(grace)
    return keeper


async def renewing(keeper: ActorHandle[Any], grace: float) -> None:
    """Renew the lease every quarter of the grace, until cancelled."""
    while True:
        await asyncio.sleep(grace / 4)
        try:
            await keeper.renew.remote(grace)
        except Exception as exc:  # the keeper died: its actors go with it
            log.warning("cannot renew the Ray lease: %r", exc)
            return


async def held_runs(namespace: str) -> dict[str, ActorHandle[Any]]:
    """The rollouts the namespace's shards hold (running, or ended and not yet taken):
    trace id -> the shard holding it."""
    import ray

    held: dict[str, ActorHandle[Any]] = {}
    for actor in ray.util.list_named_actors(all_namespaces=True):
        if actor["namespace"] != namespace or not actor["name"].startswith(SHARD_PREFIX):
            continue
        try:
            shard = ray.get_actor(actor["name"], namespace=namespace)
            for trace_id in await shard.holds.remote():
                held[trace_id] = shard
        except Exception as exc:  # dead meanwhile: its rollouts start again
            log.debug("shard %s holds nothing: %r", actor["name"], exc)
    return held


async def keeper_watch(namespace: str) -> None:
    """In a shard: exit this worker once the namespace's keeper is gone."""
    from ray.exceptions import RayActorError

    import ray

    while True:
        await asyncio.sleep(_WATCH)
        try:
            keeper = ray.get_actor(KEEPER, namespace=namespace)
            await keeper.ping.remote()
        except (RayActorError, ValueError):  # dead, or no longer named
            os._exit(0)
        except Exception as exc:  # e.g. the GCS slow to answer: look again
            log.debug("cannot reach the lease keeper: %r", exc)
