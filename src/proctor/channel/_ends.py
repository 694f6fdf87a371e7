"""What a client talks through: the dialer for each kind of target, the protocol that
reads a socket's frames, the link that holds an in-process session (the server sees it
as the session's connection), and a capability forwarder's accepted connections."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Generator
from typing import TYPE_CHECKING, Any, Protocol
from urllib.parse import urlsplit

from .._errors import ConnectError, ConnectionLost, FrameTooLarge
from ._framing import LineBuffer
from ._memory import StreamProtocol
from ._reads import BufferedReads
from ._splice import Pipe, host_port

if TYPE_CHECKING:
    from ._server import EnvServer
    from ._session import _Session

__all__ = ["TURN", "ClientSide", "Dialer", "dialer_for"]

Dialer = Callable[[Callable[[], StreamProtocol]], Awaitable[asyncio.Transport]]
"""Opens one connection to a server for the protocol the factory makes."""


class ClientSide(Protocol):
    """What the ends below need of the client they serve (`EnvClient`)."""

    url: str
    _link: _LocalLink | None
    _locals: set[_LocalEnd]
    _tunnels: set[asyncio.Task[Any]]

    def _on_frame(self, line: bytes) -> None: ...
    def _fail(self, exc: Exception) -> None: ...
    def _admit(self, transport: asyncio.BaseTransport) -> bool: ...
    async def _tunnel(self, name: str, local: Pipe) -> None: ...


class _ClientProtocol(BufferedReads):
    def __init__(self, client: ClientSide) -> None:
        self.client = client
        self.buffer = LineBuffer()

    def data_received(self, data: bytes) -> None:
        try:
            lines = self.buffer.feed(data)
        except FrameTooLarge as exc:
            for line in exc.frames:
                self.client._on_frame(line)
            self.client._fail(exc)
            return
        for line in lines:
            self.client._on_frame(line)

    def connection_lost(self, exc: Exception | None) -> None:
        self.client._fail(
            ConnectionLost(f"connection to {self.client.url} closed" + (f": {exc}" if exc else ""))
        )


class _Turn:
    """Awaited, yields to the event loop once: `asyncio.sleep(0)` in one frame (an
    in-process client's connect yields so, as a socket's would)."""

    __slots__ = ()

    def __await__(self) -> Generator[None, None, None]:
        yield


TURN = _Turn()


class _LocalLink:
    """An in-process client's end of its session: what the server holds as its
    connection. The server closing it (after `bye`) or aborting it (when it closes)
    reaches the client on the next loop turn, as a socket's close would."""

    __slots__ = ("client", "server", "session")

    def __init__(self, client: ClientSide, server: EnvServer) -> None:
        self.client: ClientSide | None = client
        self.server = server
        self.session: _Session | None = None
        client._link = self

    def send(self, frame: bytes) -> None:
        """A held session answers through `direct`, never in frames: nothing to send."""

    def close(self) -> None:
        asyncio.get_running_loop().call_soon(self._gone)

    def abort(self) -> None:
        self.close()

    def _gone(self) -> None:
        client = self.client
        if client is not None:
            client._fail(ConnectionLost(f"connection to {client.url} closed"))
            self.drop()

    def drop(self) -> None:
        """The client side is gone: the session detaches (and parks a suspended task).
        Both back references go, so the client, link and session hold no cycle."""
        session, self.session, self.client = self.session, None, None
        if session is not None:
            self.server._connections.discard(self)
            session.detach()


class _LocalEnd(Pipe):
    """An accepted forwarder connection; dials a tunnel and waits for it.

    With `same_uid` (a TCP forwarder), a connection from another uid is closed at once.
    """

    def __init__(self, client: ClientSide, name: str, *, same_uid: bool = False) -> None:
        super().__init__()
        self.client = client
        self.name = name
        self.same_uid = same_uid

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        super().connection_made(transport)
        if self.same_uid and not self.client._admit(transport):
            assert self.transport is not None
            self.transport.abort()
            return
        self.client._locals.add(self)
        task = asyncio.get_running_loop().create_task(self.client._tunnel(self.name, self))
        self.client._tunnels.add(task)
        task.add_done_callback(self.client._tunnels.discard)

    def connection_lost(self, exc: Exception | None) -> None:
        super().connection_lost(exc)
        self.client._locals.discard(self)


def dialer_for(target: str | EnvServer) -> tuple[Dialer, str]:
    """A dialer and a display URL for `tcp://host:port`, `unix:///path` or a `EnvServer`."""
    from ._server import EnvServer

    if isinstance(target, EnvServer):
        return target.dial_memory, f"memory://{target.env.name}"
    scheme = urlsplit(target).scheme if "://" in target else "tcp"
    if scheme == "unix":
        return _unix_dialer(target)
    if scheme not in ("tcp", "hud", "proctor"):
        raise ConnectError(
            f"{target}: unsupported scheme {scheme!r} (use tcp://host:port or unix:///path)"
        )
    try:
        host, port = host_port(target)
    except ValueError as exc:
        raise ConnectError(str(exc)) from None

    async def dial_tcp(factory: Callable[[], StreamProtocol]) -> asyncio.Transport:
        loop = asyncio.get_running_loop()
        transport, _ = await loop.create_connection(factory, host, port)
        return transport

    return dial_tcp, f"tcp://{host}:{port}"


def _unix_dialer(target: str) -> tuple[Dialer, str]:
    parts = urlsplit(target)
    if parts.netloc or not parts.path.startswith("/") or parts.query or parts.fragment:
        raise ConnectError(f"{target}: a Unix socket URL is unix:///absolute/path")
    path = parts.path

    async def dial_unix(factory: Callable[[], StreamProtocol]) -> asyncio.Transport:
        transport, _ = await asyncio.get_running_loop().create_unix_connection(factory, path)
        return transport

    return dial_unix, f"unix://{path}"
