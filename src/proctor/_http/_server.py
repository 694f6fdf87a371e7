"""A lean HTTP/1.1 server on asyncio protocols: one task per request, bodies buffered.

A connection (`_connection`) reads one request (head, then body) and runs the handler
in a task; bytes that arrive meanwhile (a pipelined request) wait in the buffer, so
responses go out in order. Losing the connection cancels that task, which also closes
a streaming body. The server accepts, caps and sweeps connections and shuts them down.
"""

from __future__ import annotations

import asyncio
from typing import TYPE_CHECKING

from .._resource import AsyncResource
from ._connection import Connection
from ._limits import HttpLimits
from ._message import Handler, Screen

if TYPE_CHECKING:
    from ssl import SSLContext

__all__ = ["HttpServer"]


class HttpServer(AsyncResource):
    """Serve `handler` over HTTP/1.1 on `host:port` (port 0 picks a free one).

    Keep-alive, pipelining, HTTP/1.0, Content-Length and chunked request bodies and
    `Expect: 100-continue` are handled here. A malformed head gets 400, a head over
    `limits.max_head` bytes 431 and a body over `limits.max_body` bytes 413, each
    closing the connection; connections, buffered bytes and read deadlines are bounded
    by `limits` (see `HttpLimits`). A handler exception becomes a logged 500 with a
    JSON error body.

    Args:
        handler: the coroutine function that answers each request.
        host: the address to bind.
        port: the port to bind; 0 picks a free one (see `port` after `start`).
        limits: the bounds; `HttpLimits()` by default.
        screen: checks each request from its head, before its body is read (to refuse
            an unauthenticated request without buffering its body); see `Screen`.
        ssl: serve HTTPS with this context.
    """

    def __init__(
        self,
        handler: Handler,
        *,
        host: str = "127.0.0.1",
        port: int = 0,
        limits: HttpLimits | None = None,
        screen: Screen | None = None,
        ssl: SSLContext | None = None,
    ) -> None:
        self.handler = handler
        self.screen = screen
        self.ssl = ssl
        self.host = host
        self.limits = limits = limits or HttpLimits()
        self.max_body = limits.max_body
        self.max_head = limits.max_head
        self.buffered = 0  # request bytes held over all connections
        self._port = port
        self._server: asyncio.Server | None = None
        self._connections: set[Connection] = set()
        self._active = 0  # connections counted against the cap (not refused ones)
        self._cap = limits.max_connections
        # Connections with no request in hand (idle, or reading a head), longest first:
        # the ones closed to make room at the cap.
        self._quiet: dict[Connection, None] = {}
        self._sweeper: asyncio.TimerHandle | None = None
        self._all_gone: asyncio.Future[None] | None = None
        self.closing = False

    @property
    def port(self) -> int:
        """The bound port (after `start`)."""
        return self._port

    @property
    def url(self) -> str:
        """`http://host:port` (or https), for clients."""
        host = f"[{self.host}]" if ":" in self.host else self.host
        return f"{'https' if self.ssl else 'http'}://{host}:{self._port}"

    @property
    def connections(self) -> int:
        """Connections open and counted against `limits.max_connections`."""
        return self._active

    async def start(self) -> None:
        """Bind and start accepting connections."""
        loop = asyncio.get_running_loop()
        self._cap = self.limits.connection_cap()
        self._server = await loop.create_server(
            lambda: Connection(self), self.host, self._port, backlog=4096, ssl=self.ssl
        )
        self._port = self._server.sockets[0].getsockname()[1]
        self._sweeper = loop.call_later(self.limits.sweep_interval, self._sweep)

    async def aclose(self, grace: float = 5.0) -> None:
        """Stop accepting, close idle connections, let in-flight requests finish.

        Requests still running after `grace` seconds are cancelled and their
        connections reset.
        """
        server, self._server = self._server, None
        if server is None:
            return
        self.closing = True
        if self._sweeper is not None:
            self._sweeper.cancel()
        server.close()
        tasks = [t for conn in list(self._connections) if (t := conn.shutdown()) is not None]
        if tasks:
            _, pending = await asyncio.wait(tasks, timeout=grace)
            for task in pending:
                task.cancel()
            if pending:
                await asyncio.wait(pending, timeout=1.0)
        if self._connections:  # closing ones flush their last response first, briefly
            self._all_gone = asyncio.get_running_loop().create_future()
            await asyncio.wait([self._all_gone], timeout=1.0)
        for conn in list(self._connections):
            conn.abort()
        await server.wait_closed()

    # -- ConnectionHost: what each Connection calls back ------------------------

    def admit(self, conn: Connection) -> bool:
        """Count a new connection against the cap, closing the longest-quiet one to make
        room; False when every connection is busy with a request."""
        self._connections.add(conn)
        if self._active >= self._cap:
            if not self._quiet:
                return False
            next(iter(self._quiet)).evict()
        self._active += 1
        self._quiet[conn] = None
        return True

    def quiet(self, conn: Connection) -> None:
        """`conn` waits for a request: the first to close when the cap needs room."""
        self._quiet[conn] = None

    def busy(self, conn: Connection) -> None:
        """`conn` has a request in hand (or closes)."""
        self._quiet.pop(conn, None)

    def release(self) -> None:
        """An admitted connection closes."""
        self._active -= 1

    def forget(self, conn: Connection) -> None:
        """`conn` is gone."""
        self._connections.discard(conn)
        if not self._connections and self._all_gone is not None and not self._all_gone.done():
            self._all_gone.set_result(None)

    def _sweep(self) -> None:
        """Expire connections past their deadline; runs every `sweep_interval`."""
        now = asyncio.get_running_loop().time()
        for conn in [c for c in self._connections if c.deadline <= now]:
            conn.expire()
        if not self.closing:
            self._sweeper = asyncio.get_running_loop().call_later(
                self.limits.sweep_interval, self._sweep
            )
