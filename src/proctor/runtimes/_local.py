"""`LocalRuntime`: serve the environment in this process, over an in-memory transport."""

from __future__ import annotations

import asyncio
import inspect
import secrets
from collections.abc import Callable
from contextlib import AbstractAsyncContextManager
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypeAlias

from .._errors import RuntimeLaunchError, SourceError
from .._loader import find_environment
from ..channel import DEFAULT_PARK_TTL, EnvServer
from ..env import Environment
from ._base import Endpoint, Runtime

if TYPE_CHECKING:
    from ..records import Task

__all__ = ["EnvSource", "LocalRuntime", "find_environment"]

EnvSource: TypeAlias = Environment | str | Path | Callable[[], Any]
"""An environment object, a path to Python source, or a factory returning one."""


class LocalRuntime(Runtime):
    """Serve in this process: no socket unless something outside asks for an address.

    The environment starts (initialize hooks) when the first overlapping rollout
    arrives and stops (shutdown hooks) when the last one leaves; enter the runtime as
    an async context manager to keep one server up across a whole batch. Environment
    code shares this event loop, so blocking code stalls other rollouts: use
    `SubprocessRuntime` for isolation. The server requires a fresh token (in the
    `Endpoint`), so the loopback listener `Endpoint.tcp_url()` may bind is not open to
    other local users.
    """

    def __init__(
        self, source: EnvSource, *, env_name: str | None = None, park_ttl: float | None = None
    ) -> None:
        self.source = source
        self.env_name = env_name
        self._park_ttl = park_ttl
        self._env: Environment | None = None
        self._server: EnvServer | None = None
        self._endpoint: Endpoint | None = None  # the server's, shared by every lease
        self._token: str | None = None
        self._users = 0
        self._lock: asyncio.Lock | None = None
        self._lock_loop: asyncio.AbstractEventLoop | None = None

    def __repr__(self) -> str:
        return f"LocalRuntime({self.source!r})"

    def __call__(self, task: Task) -> AbstractAsyncContextManager[Endpoint]:
        return _Lease(self, task.env)

    async def __aenter__(self) -> LocalRuntime:
        await self._acquire(self.env_name)
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self._release()

    async def _acquire(self, env_name: str | None) -> Endpoint:
        server, endpoint = self._server, self._endpoint
        if self._users and server is not None and endpoint is not None:
            self._check(server.env, env_name)
            self._users += 1
            return endpoint
        # The lock also covers _release, so a restart never overlaps the last shutdown.
        async with self._guard():
            if self._server is None:
                env = await self._load(env_name)
                self._check(env, env_name)  # before start: a refused task starts nothing
                try:
                    await env.start()
                except Exception as exc:
                    raise RuntimeLaunchError(f"{env.name}: initialize failed: {exc!r}") from exc
                self._token = secrets.token_urlsafe(32)
                park_ttl = self._park_ttl or DEFAULT_PARK_TTL
                self._server = EnvServer(env, park_ttl=park_ttl, token=self._token)
                self._endpoint = Endpoint(f"memory://{env.name}", self._server, token=self._token)
            self._check(self._server.env, env_name)
            self._users += 1
            assert self._endpoint is not None
            return self._endpoint

    async def _release(self) -> None:
        async with self._guard():
            self._users -= 1
            if self._users or self._server is None:
                return
            server, self._server, self._endpoint = self._server, None, None
            try:
                await server.aclose()
            finally:
                await server.env.stop()

    def _guard(self) -> asyncio.Lock:
        # An asyncio.Lock binds to the loop it first waits in; a runtime reused from a
        # later event loop (a second asyncio.run, a test's fresh loop) needs a new one.
        loop = asyncio.get_running_loop()
        if self._lock is None or self._lock_loop is not loop:
            self._lock, self._lock_loop = asyncio.Lock(), loop
        return self._lock

    async def _load(self, env_name: str | None) -> Environment:
        if self._env is None:
            self._env = await _resolve(self.source, env_name or self.env_name)
        return self._env

    def _check(self, env: Environment, env_name: str | None) -> None:
        if env_name and env_name != env.name:
            raise RuntimeLaunchError(
                f"task wants environment {env_name!r} but {self.source!r} serves {env.name!r}"
            )


class _Lease:
    """One rollout's hold on the runtime's server: acquired on entry, released on exit
    (the last one shielded, so a cancelled rollout still stops the server)."""

    __slots__ = ("env_name", "runtime")

    def __init__(self, runtime: LocalRuntime, env_name: str) -> None:
        self.runtime = runtime
        self.env_name = env_name

    async def __aenter__(self) -> Endpoint:
        return await self.runtime._acquire(self.env_name)

    async def __aexit__(self, *exc: object) -> None:
        runtime = self.runtime
        if runtime._users > 1:  # not the last: nothing stops, no lock (nor task) needed
            runtime._users -= 1
            return
        await asyncio.shield(runtime._release())


async def _resolve(source: EnvSource, env_name: str | None) -> Environment:
    if isinstance(source, Environment):
        return source
    if isinstance(source, str | Path):
        try:
            return find_environment(source, env_name)
        except SourceError as exc:
            raise RuntimeLaunchError(str(exc)) from exc
    made = source()
    if inspect.isawaitable(made):
        made = await made
    if not isinstance(made, Environment):
        raise RuntimeLaunchError(f"{source!r} returned {type(made).__name__}, not an Environment")
    return made
