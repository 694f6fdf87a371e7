"""Sans-IO framing: compact UTF-8 JSON objects, one per line, at most 16 MiB each."""

from __future__ import annotations

import json
from typing import Any

import orjson

from .._errors import ProtocolError

__all__ = ["MAX_FRAME", "FrameTooLarge", "LineBuffer", "ParseError", "decode", "encode"]

MAX_FRAME = 16 * 1024 * 1024
"""Largest frame, in bytes, not counting the terminating newline."""


class ParseError(ProtocolError):
    """A line is not valid JSON."""


class FrameTooLarge(ProtocolError):
    """A line grew past the frame limit before its newline arrived."""


def encode(obj: Any) -> bytes:
    """Serialize one frame, newline included, compact and UTF-8."""
    try:
        return orjson.dumps(obj) + b"\n"
    except TypeError:
        # orjson refuses integers past 64 bits and non-string keys; stdlib does not.
        text = json.dumps(obj, separators=(",", ":"), ensure_ascii=False, allow_nan=False)
        return text.encode() + b"\n"


def decode(line: bytes) -> Any:
    """Parse one frame's bytes (without or with its newline).

    Raises:
        ParseError: the bytes are not one valid UTF-8 JSON value.
    """
    try:
        return orjson.loads(line)
    except orjson.JSONDecodeError as exc:
        raise ParseError(f"parse error: {exc}") from None


class LineBuffer:
    """Split a byte stream into frames, refusing any frame larger than `limit`."""

    __slots__ = ("_chunks", "_size", "limit")

    def __init__(self, limit: int = MAX_FRAME) -> None:
        self.limit = limit
        self._chunks: list[bytes] = []
        self._size = 0

    def feed(self, data: bytes) -> list[bytes]:
        """Add bytes; return the complete frames they finish, in order.

        Blank lines are skipped. Raises `FrameTooLarge` when the pending frame passes the
        limit; the buffer is then useless and the connection should close.
        """
        if b"\n" not in data:
            self._push(data)
            return []
        parts = data.split(b"\n")
        first = parts[0]
        if self._chunks:
            self._push(first)
            first = b"".join(self._chunks)
            self._chunks.clear()
            self._size = 0
        frames = [first, *parts[1:-1]]
        self._push(parts[-1])
        out = []
        for frame in frames:
            if len(frame) > self.limit:
                raise FrameTooLarge(f"frame of {len(frame)} bytes exceeds {self.limit}")
            if frame.strip():
                out.append(frame)
        return out

    def feed_first(self, data: bytes) -> tuple[bytes | None, bytes]:
        """Read only the first frame (the preface); return it and the bytes after it.

        Until a complete non-blank line arrives the result is `(None, b"")`.
        """
        while True:
            head, sep, rest = data.partition(b"\n")
            self._push(head)
            if not sep:
                return None, b""
            frame = self.drain()
            if frame.strip():
                return frame, rest
            data = rest

    def drain(self) -> bytes:
        """Return and forget the bytes of an unfinished frame (for switching to raw mode)."""
        rest = b"".join(self._chunks)
        self._chunks.clear()
        self._size = 0
        return rest

    def _push(self, data: bytes) -> None:
        if not data:
            return
        self._size += len(data)
        if self._size > self.limit:
            raise FrameTooLarge(f"frame exceeds {self.limit} bytes")
        self._chunks.append(data)
