"""An in-memory transport pair: the same frames and protocols, no sockets.

Writes are delivered synchronously to the peer protocol, which is why an in-process
rollout costs a fraction of a loopback one. Flow control maps one side's
`pause_reading` to the other side's `pause_writing`, as a socket would.
"""

from __future__ import annotations

import asyncio
from typing import Any

from ._reads import BufferedReads

__all__ = ["StreamProtocol", "memory_pair"]

StreamProtocol = asyncio.Protocol | BufferedReads
"""A protocol that takes bytes through `data_received` (ours read sockets buffered)."""


class MemoryTransport(asyncio.Transport):
    """One end of an in-memory byte pipe."""

    def __init__(self, loop: asyncio.AbstractEventLoop, protocol: StreamProtocol) -> None:
        super().__init__()
        self._loop = loop
        self._protocol = protocol
        self._peer: MemoryTransport | None = None
        self._closing = False
        self._eof_sent = False

    def get_extra_info(self, name: str, default: Any = None) -> Any:
        return ("memory", 0) if name in ("peername", "sockname") else default

    def get_protocol(self) -> asyncio.BaseProtocol:
        return self._protocol

    def set_protocol(self, protocol: asyncio.BaseProtocol) -> None:
        assert isinstance(protocol, asyncio.Protocol | BufferedReads)
        self._protocol = protocol

    def is_closing(self) -> bool:
        return self._closing

    def write(self, data: bytes | bytearray | memoryview) -> None:
        peer = self._peer
        if self._closing or self._eof_sent or peer is None or peer._closing:
            return
        peer._protocol.data_received(bytes(data))

    def can_write_eof(self) -> bool:
        return True

    def write_eof(self) -> None:
        peer = self._peer
        if self._eof_sent or peer is None or peer._closing:
            return
        self._eof_sent = True
        if not peer._protocol.eof_received():
            peer.close()

    def pause_reading(self) -> None:
        if self._peer is not None and not self._peer._closing:
            self._peer._protocol.pause_writing()

    def resume_reading(self) -> None:
        if self._peer is not None and not self._peer._closing:
            self._peer._protocol.resume_writing()

    def is_reading(self) -> bool:
        return not self._closing

    def get_write_buffer_size(self) -> int:
        return 0

    def close(self) -> None:
        """Close both ends; each protocol hears `connection_lost` on the next loop turn."""
        if self._closing:
            return
        self._closing = True
        self._loop.call_soon(self._protocol.connection_lost, None)
        peer, self._peer = self._peer, None  # no pair cycle left for the collector
        if peer is not None:
            peer.close()

    def abort(self) -> None:
        self.close()


def memory_pair(a: StreamProtocol, b: StreamProtocol) -> tuple[MemoryTransport, MemoryTransport]:
    """Connect two protocols; `b` (the accepting side) hears `connection_made` first."""
    loop = asyncio.get_running_loop()
    ta, tb = MemoryTransport(loop, a), MemoryTransport(loop, b)
    ta._peer, tb._peer = tb, ta
    b.connection_made(tb)
    a.connection_made(ta)
    return ta, tb
