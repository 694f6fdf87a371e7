"""The line protocol of the shell and computer servers: one JSON object a line each way.

A request carries an `id`; its reply carries the same `id` and either the result or
`error: {code, message}`, with JSON-RPC's codes.
"""

from __future__ import annotations

from typing import Any

import orjson

from .._errors import ProtocolError, RemoteError

__all__ = [
    "BAD_REQUEST",
    "FAILED",
    "MAX_LINE",
    "TOO_LARGE",
    "_LineError",
    "read_reply",
    "read_request",
]

MAX_LINE = 64 * 1024 * 1024
BAD_REQUEST = -32602
FAILED = -32000
TOO_LARGE = -32600


class _LineError(Exception):
    """A request the server refuses or cannot carry out; becomes an error reply."""

    def __init__(self, code: int, message: str) -> None:
        super().__init__(message)
        self.code = code


def read_request(line: bytes) -> dict[str, Any]:
    """The request object of a line.

    Raises:
        _LineError: `BAD_REQUEST`: not JSON, or not an object.
    """
    try:
        req = orjson.loads(line)
    except orjson.JSONDecodeError as exc:
        raise _LineError(BAD_REQUEST, f"not JSON: {exc}") from None
    if not isinstance(req, dict):
        raise _LineError(BAD_REQUEST, "a request is a JSON object")
    return req


def read_reply(line: bytes, what: str) -> dict[str, Any]:
    """The reply object of a line; `what` names it in errors (`<url>: reply`).

    Raises:
        ProtocolError: not JSON, or not an object.
        RemoteError: the reply is an error.
    """
    try:
        reply = orjson.loads(line)
    except orjson.JSONDecodeError as exc:
        raise ProtocolError(f"{what} is not JSON: {exc}") from None
    if not isinstance(reply, dict):
        raise ProtocolError(f"{what} is not an object")
    error = reply.get("error")
    if isinstance(error, dict):
        raise RemoteError(int(error.get("code", 0)), str(error.get("message", "")))
    return reply
