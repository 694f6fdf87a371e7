"""`CapabilityServer`: what the shell, user, desktop, browser and MCP servers share.

Each makes a private folder (mode 0700, `proctor-<kind>-*`) when it starts and removes
it when it stops, listens on a socket (a Unix socket `<kind>.sock` in that folder, or a
loopback TCP port), tracks the connections it accepted so that stopping ends them, has
a `url` once started, and works as `async with server:`.
"""

from __future__ import annotations

import asyncio
import os
import shutil
from collections.abc import Coroutine
from typing import Any, ClassVar, Self

from .._tempdirs import owned_tempdir
from ._line_protocol import MAX_LINE

__all__ = ["CapabilityServer"]


class CapabilityServer:
    """A capability server's folder, socket and connections (see the module doc).

    A subclass names itself in `kind` and serves one connection in `_connection`,
    running work that stopping cancels in `_in_flight` tasks. One that starts or stops
    more than its socket brackets that in its own `start` (`_make_dir`, `_listen`) and
    `aclose` (`_stop_listening`, `_remove_dir`).
    """

    kind: ClassVar[str]
    tcp: ClassVar[bool] = False
    """Listen on a loopback TCP port (`http://127.0.0.1:<port>`), not a Unix socket."""
    max_line: ClassVar[int] = MAX_LINE
    """The longest line a connection's reader takes."""

    def __init__(self) -> None:
        self._dir: str | None = None
        self._server: asyncio.Server | None = None
        self._conns: dict[asyncio.Task[Any], asyncio.StreamWriter] = {}
        self._tasks: set[asyncio.Task[Any]] = set()

    @property
    def url(self) -> str:
        """Where clients connect once started: `unix:///<private folder>/<kind>.sock`, or
        `http://127.0.0.1:<port>` for a TCP server (MCP: `http+unix://...`).

        Raises:
            RuntimeError: not started.
        """
        where = self._where()
        if where is None:
            raise RuntimeError(f"{type(self).__name__} is not started")
        return where

    async def start(self) -> str:
        """Make the private folder, bind the socket and serve; returns the URL.

        Raises:
            OSError: the folder or the socket could not be made.
        """
        self._make_dir()
        try:
            await self._listen()
        except BaseException:
            self._remove_dir()
            raise
        return self.url

    async def aclose(self) -> None:
        """Stop listening, end every connection and the work in flight, remove the folder."""
        await self._stop_listening()
        self._remove_dir()

    async def __aenter__(self) -> Self:
        await self.start()
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.aclose()

    def _where(self) -> str | None:
        """The URL, None while not started."""
        if self._server is None or self._dir is None:
            return None
        if self.tcp:
            return f"http://127.0.0.1:{self._server.sockets[0].getsockname()[1]}"
        return f"unix://{os.path.join(self._dir, f'{self.kind}.sock')}"

    async def _connection(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        """Serve one accepted connection until it ends."""
        raise NotImplementedError

    def _make_dir(self) -> str:
        """Make the private folder (only this uid may enter it)."""
        self._dir = owned_tempdir(self.kind)
        return self._dir

    def _remove_dir(self) -> None:
        if self._dir is not None:
            shutil.rmtree(self._dir, ignore_errors=True)
            self._dir = None

    async def _listen(self) -> None:
        """Accept connections, each a task serving `_connection`.

        Raises:
            OSError: the socket could not be bound.
        """
        if self.tcp:
            self._server = await asyncio.start_server(
                self._accepted, "127.0.0.1", 0, limit=self.max_line
            )
        else:
            assert self._dir is not None
            path = os.path.join(self._dir, f"{self.kind}.sock")
            self._server = await asyncio.start_unix_server(
                self._accepted, path, limit=self.max_line
            )

    async def _accepted(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        me = asyncio.current_task()
        assert me is not None
        self._conns[me] = writer
        try:
            await self._connection(reader, writer)
        finally:
            del self._conns[me]

    def _in_flight(self, work: Coroutine[Any, Any, Any]) -> asyncio.Task[Any]:
        """`work` in a task of its own, cancelled by `_stop_listening`."""
        task = asyncio.get_running_loop().create_task(work)
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)
        return task

    async def _stop_listening(self) -> None:
        """Stop accepting, abort every connection's socket, cancel the work in flight and
        wait for them all (a connection ends on its own once its socket is gone;
        cancelling its task would make asyncio log it)."""
        server, self._server = self._server, None
        if server is not None:
            server.close()
        for writer in self._conns.values():
            writer.transport.abort()
        for task in list(self._tasks):
            task.cancel()
        await asyncio.gather(*self._tasks, *self._conns, return_exceptions=True)
