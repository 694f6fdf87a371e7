"""`SharedChildRuntime`: one child process serving every rollout of a foreign source.

The verifiers and Inspect importers serve their environment in another interpreter
whose imports take seconds; their environments keep no state between task runs, so one
child started on first use serves all rollouts (each on its own connection).
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator, Sequence
from contextlib import AbstractAsyncContextManager, AsyncExitStack
from typing import TYPE_CHECKING

from ..runtimes import Endpoint, Runtime, SubprocessRuntime

if TYPE_CHECKING:
    from ..records import Task

__all__ = ["SharedChildRuntime"]


class SharedChildRuntime(Runtime):
    """Every rollout served by one child running `command` (a `SubprocessRuntime`
    command: it prints its port and requires `$PROCTOR_TOKEN`).

    The child starts on the first rollout (or on `async with`) and stops on `aclose()`
    or when this process exits; one started on another event loop is replaced.
    """

    def __init__(self, command: Sequence[str], *, startup_timeout: float = 300.0) -> None:
        self.child = SubprocessRuntime(command=command, startup_timeout=startup_timeout)
        self._stack: AsyncExitStack | None = None
        self._endpoint: Endpoint | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self._lock: asyncio.Lock | None = None

    def __repr__(self) -> str:
        return f"SharedChildRuntime({self.child.command!r})"

    def __call__(self, task: Task) -> AbstractAsyncContextManager[Endpoint]:
        return self._shared()

    async def __aenter__(self) -> SharedChildRuntime:
        await self._start()
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.aclose()

    async def aclose(self) -> None:
        """Stop the child, if it runs."""
        stack, self._stack, self._endpoint = self._stack, None, None
        if stack is not None and self._loop is asyncio.get_running_loop():
            await stack.aclose()

    @contextlib.asynccontextmanager
    async def _shared(self) -> AsyncIterator[Endpoint]:
        yield await self._start()

    async def _start(self) -> Endpoint:
        loop = asyncio.get_running_loop()
        if self._loop is not loop:  # one started on a loop that is gone stops at exit
            self._loop, self._lock, self._stack, self._endpoint = loop, asyncio.Lock(), None, None
        assert self._lock is not None
        async with self._lock:
            if self._endpoint is not None:
                return self._endpoint
            stack = AsyncExitStack()
            endpoint: Endpoint = await stack.enter_async_context(self.child._endpoint())
            self._stack, self._endpoint = stack, endpoint
            return endpoint
