"""`RayRuntime`: each rollout's environment server in its own Ray actor.

Ray is imported only when a runtime is used, so `import proctor` stays light; install
it with `pip install 'proctor[ray]'`.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import logging
import math
import re
import secrets
import sys
import threading
from collections.abc import AsyncIterator, Mapping
from contextlib import AbstractAsyncContextManager
from pathlib import Path
from typing import TYPE_CHECKING, Any

from .._errors import RuntimeLaunchError, TeardownError
from ..serve import SHUTDOWN_FAILED
from ._base import Endpoint, Runtime
from ._process import check_teardown
from ._subprocess import TOKEN_ENV, SubprocessRuntime

if TYPE_CHECKING:
    from ray.actor import ActorHandle

    from ..records import Task

__all__ = ["RayRuntime", "actor_namespace", "connect_ray", "placement"]

log = logging.getLogger("proctor.runtimes.ray")

NODE_ENV = "PROCTOR_RAY_NODE_ID"  # the node's Ray id, for the environment's code
_CONNECT_LOCK = threading.Lock()  # ray.init is per process; two loops may race for it
_MEMORY = re.compile(r"(\d+(?:\.\d+)?)\s*([kmgt]?)i?b?", re.IGNORECASE)


class RayRuntime(Runtime):
    """Serve each rollout's environment in its own Ray actor, placed across a cluster.

    The actor loads `source`, runs the initialize hooks, binds a port on its node's
    address and returns `tcp://node:port` with a fresh token (even on loopback, where
    every local user could otherwise connect). The agent stays in this process and
    connects there. At teardown the actor closes the server and runs the shutdown hooks
    (within `stop_timeout`), then is killed: Ray ends its worker process.

    Placement is `resources` overlaid with the row's `runtime_config["resources"]`:
    `cpus`, `gpus` and `memory` (bytes, or `"512m"`, `"2g"`) are Ray's CPU, GPU and
    memory; any other key is a custom resource, such as a node's label from
    `ray start --resources '{"gpu_box": 1}'`. Unset, Ray's actor default applies.

    With a `batch`, every actor is named in the Ray namespace `actor_namespace(batch)`,
    so what a killed batch left on the cluster is found (`proctor batch reconcile`).

    Args:
        source: Python file or folder defining the environment; every node must see
            it at this path (a shared file system, or the same checkout).
        address: the cluster, when this process is not connected yet
            (`ray.init(address=...)`; None: `RAY_ADDRESS` or Ray's own lookup).
        resources: placement for every actor, before the row's own.
        batch: the batch id its actors carry (None: anonymous actors).
        startup_timeout: seconds for an actor to be placed, start and bind.
        stop_timeout: seconds the shutdown hooks get before the actor is killed.

    Raises:
        ValueError: `resources` is malformed.
    """

    def __init__(
        self,
        source: str | Path,
        *,
        address: str | None = None,
        resources: Mapping[str, Any] | None = None,
        batch: str | None = None,
        startup_timeout: float = 60.0,
        stop_timeout: float = 5.0,
    ) -> None:
        self.source = str(Path(source).resolve())
        self.address = address
        self.resources = dict(resources or {})
        self.batch = batch
        placement(self.resources)
        self.startup_timeout = startup_timeout
        self.stop_timeout = stop_timeout

    def __repr__(self) -> str:
        return f"RayRuntime({self.source!r}, address={self.address!r})"

    def __call__(self, task: Task) -> AbstractAsyncContextManager[Endpoint]:
        return self._endpoint(task)

    def options(self, task: Task) -> dict[str, Any]:
        """The Ray actor options that place `task`'s environment.

        Raises:
            RuntimeLaunchError: the row's `runtime_config["resources"]` is malformed.
        """
        config = task.runtime_config or {}
        extra = config.get("resources") or {}
        if not isinstance(extra, Mapping):
            raise RuntimeLaunchError(f"{task.slug}: runtime_config.resources must be a mapping")
        try:
            return placement({**self.resources, **extra})
        except ValueError as exc:
            raise RuntimeLaunchError(f"{task.slug}: runtime_config.resources: {exc}") from None

    @contextlib.asynccontextmanager
    async def _endpoint(self, task: Task) -> AsyncIterator[Endpoint]:
        options = self.options(task)
        await connect_ray(self.address)
        named = {}
        if self.batch is not None:
            named = {"name": secrets.token_hex(8), "namespace": actor_namespace(self.batch)}
        actor = _env_actor().options(**options, **named).remote()
        served = False
        try:
            url, token = await self._serve(actor, task, options)
            served = True
            yield Endpoint(url, token=token, died=_watch(actor))
        finally:
            # An actor that never served has no hooks to run: it may not even be placed.
            why = await _retire(actor, self.stop_timeout if served else None)
        check_teardown(why)

    async def _serve(
        self, actor: ActorHandle[Any], task: Task, options: dict[str, Any]
    ) -> tuple[str, str | None]:
        from ray.exceptions import RayActorError, RayTaskError

        try:
            async with asyncio.timeout(self.startup_timeout):
                url, token = await actor.serve.remote(self.source, task.env)
        except TimeoutError:
            raise RuntimeLaunchError(
                f"{self!r}: no actor for {task.env!r} was placed and serving within "
                f"{self.startup_timeout:g}s (options {options})"
            ) from None
        except RayTaskError as exc:
            cause = exc.cause if exc.cause is not None else exc
            raise RuntimeLaunchError(
                f"{task.env!r} did not start in its actor: {type(cause).__name__}: {cause}"
            ) from exc
        except RayActorError as exc:
            raise RuntimeLaunchError(f"{self!r}: the actor died while starting: {exc}") from exc
        return str(url), token


class _EnvActor:
    """One environment, served from its own Ray worker process (an async actor).

    The worker got the environment Ray's processes started with (the driver's, keys
    included, on a cluster its `ray.init` started), so the environment's code does not
    run in it: the actor serves it from a `SubprocessRuntime` child behind the walls
    (own pid and mount namespaces, private /proc and /tmp, an allowlisted environment,
    another uid as root) bound on this node's address. It finds the node's Ray id in
    `$PROCTOR_RAY_NODE_ID` (it is not a Ray worker: Ray's API is not connected there).
    """

    def __init__(self) -> None:
        self._served: AbstractAsyncContextManager[Endpoint] | None = None
        self._died: asyncio.Future[str] | None = None

    async def serve(self, source: str, env_name: str) -> tuple[str, str | None]:
        """Start the walled server on this node; return (url, token)."""
        import ray

        host: str = ray.util.get_node_ip_address()  # type: ignore[no-untyped-call]
        argv = [sys.executable, "-m", "proctor.serve", source, "--token-env", TOKEN_ENV]
        argv += ["--host", host, "--env", env_name]
        node = ray.get_runtime_context().get_node_id()
        served = SubprocessRuntime(command=argv, env={NODE_ENV: node})._endpoint()
        endpoint = await served.__aenter__()
        self._served = served
        self._died = endpoint.died
        port = endpoint.url.rsplit(":", 1)[1]
        return f"tcp://{f'[{host}]' if ':' in host else host}:{port}", endpoint.token

    async def lost(self) -> str:
        """How the server ended, once it did (the driver's `Endpoint.died`)."""
        assert self._died is not None
        return await asyncio.shield(self._died)

    async def stop(self) -> str | None:
        """Stop the server (its shutdown hooks run); what they raised, if anything."""
        served, self._served = self._served, None
        if served is not None:
            try:
                await served.__aexit__(None, None, None)
            except TeardownError as exc:
                return str(exc).removeprefix(SHUTDOWN_FAILED)[:2000]
        return None


@functools.cache
def _env_actor() -> Any:
    import ray

    return ray.remote(_EnvActor)


def _watch(actor: ActorHandle[Any]) -> asyncio.Future[str]:
    """`Endpoint.died` of an actor's server: how it ended, or that the actor died (its
    worker process or its node lost). One pending call on the actor; no task here."""
    died: asyncio.Future[str] = asyncio.get_running_loop().create_future()
    reply: asyncio.Future[str] = asyncio.wrap_future(actor.lost.remote().future())

    def heard(reply: asyncio.Future[str]) -> None:
        if reply.cancelled() or died.done():
            return
        exc = reply.exception()
        if exc is None:
            died.set_result(reply.result())
        else:
            first = (str(exc).strip().splitlines() or [""])[0][:200]
            died.set_result(f"the Ray actor serving the environment died: {first}")

    reply.add_done_callback(heard)
    return died


async def _retire(actor: ActorHandle[Any], stop_timeout: float | None) -> str | None:
    """Stop the actor's server gracefully (within `stop_timeout`, if any), then kill it.

    Returns what its shutdown hooks raised, if they ran and failed.
    """
    import ray

    try:
        if stop_timeout is not None:
            async with asyncio.timeout(stop_timeout):
                return await actor.stop.remote()  # type: ignore[no-any-return]
    except Exception as exc:  # dead or stuck: it is killed all the same
        log.debug("actor %s did not stop cleanly: %r", actor, exc)
    finally:
        ray.kill(actor, no_restart=True)  # Ray ends the worker process within milliseconds
    return None


def actor_namespace(batch: str) -> str:
    """The Ray namespace where the actors of batch `batch` are named."""
    return f"proctor-{batch}"


async def connect_ray(address: str | None) -> None:
    """Connect this process to Ray unless it already is (in a thread: it blocks).

    Raises:
        RuntimeLaunchError: Ray is not installed or the cluster cannot be reached.
    """
    try:
        import ray
    except ImportError as exc:
        raise RuntimeLaunchError(
            "Ray is not installed; install it with: pip install 'proctor[ray]'"
        ) from exc
    if not ray.is_initialized():
        await asyncio.to_thread(_init, address)


def _init(address: str | None) -> None:
    import ray

    with _CONNECT_LOCK:
        if ray.is_initialized():
            return
        try:
            ray.init(address=address)
        except (ConnectionError, RuntimeError, ValueError) as exc:
            raise RuntimeLaunchError(
                f"cannot connect to Ray at {address or 'auto'}: {exc}"
            ) from exc


def placement(resources: Mapping[str, Any]) -> dict[str, Any]:
    """Ray actor options for a resource mapping (see `RayRuntime`).

    Raises:
        ValueError: a value is not a non-negative number (or a memory size).
    """
    options: dict[str, Any] = {}
    custom: dict[str, float] = {}
    for key, value in resources.items():
        if key in ("cpus", "CPU"):
            options["num_cpus"] = _amount(key, value)
        elif key in ("gpus", "GPU"):
            options["num_gpus"] = _amount(key, value)
        elif key == "memory":
            options["memory"] = _memory(value)
        elif isinstance(key, str) and key:
            custom[key] = _amount(key, value)
        else:
            raise ValueError(f"resource names are non-empty strings, not {key!r}")
    if custom:
        options["resources"] = custom
    return options


def _amount(key: str, value: Any) -> float:
    if isinstance(value, bool) or not isinstance(value, int | float) or not value >= 0:
        raise ValueError(f"{key} must be a number >= 0, not {value!r}")
    if not math.isfinite(value):
        raise ValueError(f"{key} must be finite, not {value!r}")
    return float(value)


def _memory(value: Any) -> int:
    if isinstance(value, str):
        match = _MEMORY.fullmatch(value.strip())
        if match is None:
            raise ValueError(f"memory must be bytes or a size like '512m', not {value!r}")
        number, unit = match.groups()
        return int(float(number) * 1024 ** "bkmgt".index(unit.lower() or "b"))
    return int(_amount("memory", value))
