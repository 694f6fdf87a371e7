"""Socket reads into one reused buffer per thread, handed on as `data_received`.

Shared by the wire (`proctor.channel`) and the HTTP server and client (`proctor._http`).
asyncio's default read path asks for a fresh 256 KiB buffer per `recv`; glibc serves
that size with mmap/munmap, which roughly doubled the system time of a small
request/response round trip on a fresh process (see bench/ row 3). Reading into a
buffer we keep, then copying out only the bytes that arrived, avoids it.
"""

from __future__ import annotations

import asyncio
import threading

__all__ = ["BufferedReads"]

_SIZE = 64 * 1024
_local = threading.local()


class BufferedReads(asyncio.BufferedProtocol):
    """A protocol that still speaks `data_received`, fed through a reused buffer.

    Safe to share the buffer, across connections and between the wire and HTTP: an
    event loop calls `get_buffer`, reads into it and calls `buffer_updated` in one step,
    and each thread runs at most one loop.
    """

    _view: memoryview

    def get_buffer(self, sizehint: int) -> memoryview:
        view: memoryview | None = getattr(_local, "view", None)
        if view is None:
            view = _local.view = memoryview(bytearray(_SIZE))
        self._view = view
        return view

    def buffer_updated(self, nbytes: int) -> None:
        self.data_received(bytes(self._view[:nbytes]))

    def data_received(self, data: bytes) -> None:
        """Bytes arrived (from a socket or an in-memory transport)."""
        raise NotImplementedError
