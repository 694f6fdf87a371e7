"""Byte splicing between two transports with flow control, for capability tunnels."""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import cast

from .._urls import host_port, http_unix_url, unix_path
from ._reads import BufferedReads

__all__ = ["Pipe", "dial", "host_port", "http_unix_url", "unix_path"]


class Pipe(BufferedReads):
    """Forward what arrives on this transport to `peer`; mirror EOF, close and back-pressure.

    Bytes (and an EOF) that arrive before `attach` are held, with reading paused. An EOF
    is passed on as a half-close; once both directions have ended, both sides close.
    """

    def __init__(self) -> None:
        self.peer: asyncio.Transport | None = None
        self.transport: asyncio.Transport | None = None
        self.eof = False
        self._pending: list[bytes] = []

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        # No isinstance check: uvloop's transports do not subclass asyncio's.
        self.transport = cast(asyncio.Transport, transport)

    def attach(self, peer: asyncio.Transport) -> None:
        """Start forwarding to `peer`, flushing what arrived before."""
        self.peer = peer
        for chunk in self._pending:
            peer.write(chunk)
        self._pending.clear()
        if self.transport is None or self.transport.is_closing():
            return
        if not self.eof:
            self.transport.resume_reading()
        elif not self._pass_eof(peer):
            self.transport.close()

    def data_received(self, data: bytes) -> None:
        if self.peer is None:
            self._pending.append(data)
            if self.transport is not None:
                self.transport.pause_reading()
        else:
            self.peer.write(data)

    def eof_received(self) -> bool:
        self.eof = True
        return self.peer is None or self._pass_eof(self.peer)

    def _pass_eof(self, peer: asyncio.Transport) -> bool:
        """Half-close `peer`; False (close now) unless the other direction is still open."""
        if peer.is_closing() or not peer.can_write_eof():
            return False
        peer.write_eof()
        other = peer.get_protocol()
        return not (isinstance(other, Pipe) and other.eof)

    def connection_lost(self, exc: Exception | None) -> None:
        if self.peer is not None:
            self.peer.close()

    def pause_writing(self) -> None:
        if self.peer is not None:
            self.peer.pause_reading()

    def resume_writing(self) -> None:
        if self.peer is not None:
            self.peer.resume_reading()


async def dial(url: str, factory: Callable[[], asyncio.BaseProtocol]) -> asyncio.BaseTransport:
    """Connect `factory()` to what `url` names: a Unix socket path or a TCP host:port.

    Raises:
        OSError: the connection failed.
        ValueError: the URL names neither.
    """
    loop = asyncio.get_running_loop()
    path = unix_path(url)
    if path is not None:
        transport, _ = await loop.create_unix_connection(factory, path)
    else:
        host, port = host_port(url)
        transport, _ = await loop.create_connection(factory, host, port)
    return transport
