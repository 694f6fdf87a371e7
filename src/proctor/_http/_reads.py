"""Socket reads into one reused buffer per thread, handed on as `data_received`.

asyncio's default read path allocates a fresh 256 KiB buffer per `recv`, which glibc
serves with mmap/munmap; reading into a buffer we keep and copying out only the bytes
that arrived is cheaper for the small messages HTTP mostly carries.
"""

from __future__ import annotations

import asyncio
import threading

__all__ = ["BufferedReads"]

_SIZE = 64 * 1024
_local = threading.local()


class BufferedReads(asyncio.BufferedProtocol):
    """A protocol that still speaks `data_received`, fed through a reused buffer.

    Sharing is safe: a loop calls `get_buffer`, reads into it and calls
    `buffer_updated` in one step, and each thread runs at most one loop.
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
        """Bytes arrived."""
        raise NotImplementedError
