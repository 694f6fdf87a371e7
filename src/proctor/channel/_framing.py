"""Sans-IO framing: compact UTF-8 JSON objects, one per line, at most 16 MiB each.

Integers below 1.8e308 in magnitude (the range of a double: every integer of up to
`MAX_INT_DIGITS`, 308, digits) cross the wire exactly (a request id of 2**64 is echoed as
sent); a frame holding a larger one is not valid here, whichever way it travels. orjson
reads integers beyond 64 bits as floats and refuses those beyond a double, so a frame
with a run of 19 or more digits is read once more by the stdlib, which keeps them exact.
The work per frame is bounded: both passes are linear in the frame (at most two C
parsers' worth), and no integer literal past the limit reaches the stdlib's quadratic
conversion. Only when such a frame is also nested deeper than the interpreter's
recursion limit does orjson's float stand.

A pydantic model anywhere in a frame (a prompt of MCP `PromptMessage`s, as HUD's
environments yield) is sent as HUD's server sends it: `model_dump(mode="json")`.
"""

from __future__ import annotations

import contextlib
import json
import sys
from typing import Any

import orjson

from .._errors import FrameTooLarge, ParseError

__all__ = [
    "MAX_FRAME",
    "MAX_INT_DIGITS",
    "FrameTooLarge",
    "LineBuffer",
    "ParseError",
    "decode",
    "encode",
]

MAX_FRAME = 16 * 1024 * 1024
"""Largest frame, in bytes, not counting the terminating newline."""

MAX_INT_DIGITS = 308
"""Every integer of up to this many digits crosses exactly (any below 1.8e308 does)."""


# Every digit read as "0", so a run of 19 digits is a plain substring test (4x a regex).
_DIGITS_AS_ZERO = bytes.maketrans(b"123456789", b"000000000")
_LONG_RUN = b"0" * 19


def encode(obj: Any) -> bytes:
    """Serialize one frame, newline included, compact and UTF-8.

    Raises:
        TypeError: `obj` is not JSON (unknown types, NaN, cycles, lone surrogates).
    """
    try:
        return orjson.dumps(obj, default=_model_json, option=orjson.OPT_APPEND_NEWLINE)
    except TypeError:
        pass
    # orjson refuses integers past 64 bits and non-string keys; the stdlib does not.
    try:
        text = json.dumps(
            obj, separators=(",", ":"), ensure_ascii=False, allow_nan=False, default=_model_json
        )
        line = text.encode() + b"\n"
    except ValueError as exc:  # also an integer past the interpreter's 4300 digits
        raise TypeError(f"not JSON: {exc}") from None
    try:
        decode(line)  # what we send must be what our peer can read
    except ParseError as exc:
        raise TypeError(f"not JSON for the wire: {exc}") from None
    return line


def _model_json(obj: Any) -> Any:
    """A pydantic model as plain JSON values, as HUD's server sends it; else refuse."""
    pydantic = sys.modules.get("pydantic")  # a model exists only once pydantic is loaded
    if pydantic is not None and isinstance(obj, pydantic.BaseModel):
        return obj.model_dump(mode="json")
    raise TypeError(f"Object of type {type(obj).__name__} is not JSON serializable")


def decode(line: bytes) -> Any:
    """Parse one frame's bytes (without or with its newline).

    Raises:
        ParseError: the bytes are not one valid UTF-8 JSON value.
    """
    try:
        value = orjson.loads(line)
    except orjson.JSONDecodeError as exc:  # also a number beyond a double's range
        raise ParseError(f"parse error: {exc}") from None
    if _LONG_RUN in line.translate(_DIGITS_AS_ZERO):
        with contextlib.suppress(RecursionError):
            value = json.loads(line)
    return value


class LineBuffer:
    """Split a byte stream into frames, refusing any frame larger than `limit`."""

    __slots__ = ("_chunks", "_size", "limit")

    def __init__(self, limit: int = MAX_FRAME) -> None:
        self.limit = limit
        self._chunks: list[bytes] = []
        self._size = 0

    @property
    def pending(self) -> int:
        """Bytes held for the frame not yet complete."""
        return self._size

    def feed(self, data: bytes) -> list[bytes]:
        """Add bytes; return the complete frames they finish, in order.

        Blank lines are skipped. Raises `FrameTooLarge` (carrying the complete frames
        before the oversized one) when a frame passes the limit; the buffer is then
        useless and the connection should close.
        """
        end = data.find(b"\n")
        if end < 0:
            self._push(data, [])
            return []
        if end == len(data) - 1 and not self._size:  # one whole frame: the usual read
            if end > self.limit:
                raise FrameTooLarge(f"frame exceeds {self.limit} bytes", [])
            frame = data[:end]
            return [frame] if frame.strip() else []
        parts = data.split(b"\n")
        out: list[bytes] = []
        self._push(parts[0], out)
        for frame in [self._take(), *parts[1:-1]]:
            if len(frame) > self.limit:
                raise FrameTooLarge(f"frame of {len(frame)} bytes exceeds {self.limit}", out)
            if frame.strip():
                out.append(frame)
        self._push(parts[-1], out)
        return out

    def feed_first(self, data: bytes) -> tuple[bytes | None, bytes]:
        """Read only the first frame (the preface); return it and the bytes after it.

        Until a complete non-blank line arrives the result is `(None, b"")`.
        """
        while True:
            head, sep, rest = data.partition(b"\n")
            self._push(head, [])
            if not sep:
                return None, b""
            frame = self._take()
            if frame.strip():
                return frame, rest
            data = rest

    def _take(self) -> bytes:
        """Return and forget the bytes gathered for the current frame."""
        rest = b"".join(self._chunks)
        self._chunks.clear()
        self._size = 0
        return rest

    def _push(self, data: bytes, before: list[bytes]) -> None:
        if not data:
            return
        self._size += len(data)
        if self._size > self.limit:
            raise FrameTooLarge(f"frame exceeds {self.limit} bytes", before)
        self._chunks.append(data)
