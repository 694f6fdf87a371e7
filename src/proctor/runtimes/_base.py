"""The runtime contract: `(task) -> async context manager yielding an Endpoint`."""

from __future__ import annotations

import asyncio
import contextlib
import signal
from abc import ABC, abstractmethod
from collections.abc import AsyncIterator, Callable
from contextlib import AbstractAsyncContextManager
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, TypeAlias

if TYPE_CHECKING:
    from ..channel import EnvServer
    from ..records import Task
    from ._enter import SubstrateEntry

__all__ = ["Endpoint", "Runtime", "RuntimeLike", "UrlRuntime", "exit_cause"]


@dataclass(frozen=True, slots=True)
class Endpoint:
    """Where a served environment answers.

    `url` is `tcp://host:port` for anything reachable over a socket. An in-process
    endpoint also carries its `server`, and `connect()` then talks to it in memory;
    call `await endpoint.tcp_url()` when something outside the process needs an address.
    """

    url: str
    server: EnvServer | None = None
    token: str | None = field(default=None, repr=False)
    """The server's shared secret (kept out of reprs and logs). Every server a runtime
    starts has a fresh one, on loopback too, where any local user could connect."""
    died: asyncio.Future[str] | None = field(default=None, repr=False, compare=False)
    """Resolves with the cause ("environment server killed by SIGKILL") if the substrate
    dies while the endpoint is in use; None where the runtime cannot tell. The engine
    fails the rollout at once when it does."""
    entry: SubstrateEntry | None = field(default=None, repr=False, compare=False)
    """How to start a process inside the substrate (a harness placed there,
    `CommandAgent(placement="substrate")`); None where the runtime cannot host one."""

    @property
    def target(self) -> str | EnvServer:
        """What `connect()` takes: the in-process server if any, else the URL."""
        return self.server if self.server is not None else self.url

    async def tcp_url(self) -> str:
        """A `tcp://` address for this endpoint, binding a loopback listener if needed."""
        if self.server is None:
            return self.url
        host, port = await self.server.tcp_address()
        return f"tcp://{host}:{port}"


def exit_cause(what: str, returncode: int | None) -> str:
    """How `what` ended, from its exit status: "killed by SIGKILL", "exited with code 3"."""
    if returncode is not None and returncode < 0:
        try:
            return f"{what} killed by {signal.Signals(-returncode).name}"
        except ValueError:
            return f"{what} killed by signal {-returncode}"
    return f"{what} exited with code {returncode}"


class Runtime(ABC):
    """Brings an environment up for one task and tears it down after.

    Calling the runtime returns an async context manager; entering it yields the
    `Endpoint`; leaving it (on success, error, timeout or cancellation) must stop
    everything it started, within a bounded time, and never leave a process behind.
    A runtime that can tell when its substrate dies says so through `Endpoint.died`.
    """

    def __new__(cls, *args: object, **kwargs: object) -> Runtime:
        if cls is Runtime:  # the name meant the URL runtime until 0.1
            raise TypeError(
                "Runtime is the runtime contract (an abstract base class) since 0.1: "
                "for an environment served at a URL, use UrlRuntime(url)"
            )
        return super().__new__(cls)

    @abstractmethod
    def __call__(self, task: Task) -> AbstractAsyncContextManager[Endpoint]:
        """Acquire a substrate serving `task.env`."""


RuntimeLike: TypeAlias = "Runtime | Callable[[Task], AbstractAsyncContextManager[Endpoint]]"
"""Any callable with the runtime shape is accepted where a `Runtime` is."""


class UrlRuntime(Runtime):
    """An environment already served elsewhere: the URL passes straight through.

    Args:
        url: `tcp://host:port` of the server.
        token: its shared secret, if it requires one (a user's own `proctor serve` on
            loopback may not).
    """

    def __init__(self, url: str, *, token: str | None = None) -> None:
        self.url = url
        self._token = token

    def __repr__(self) -> str:
        return f"UrlRuntime({self.url!r})"

    def __call__(self, task: Task) -> AbstractAsyncContextManager[Endpoint]:
        return self._endpoint()

    @contextlib.asynccontextmanager
    async def _endpoint(self) -> AsyncIterator[Endpoint]:
        yield Endpoint(self.url, token=self._token)
