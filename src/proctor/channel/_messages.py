"""JSON-RPC 2.0 frames and error codes of control channel v1."""

from __future__ import annotations

from typing import Any

from ._framing import encode

__all__ = [
    "INVALID_PARAMS",
    "INVALID_REQUEST",
    "METHOD_NOT_FOUND",
    "PARSE_ERROR",
    "TASK_ERROR",
    "error_frame",
    "request_frame",
    "result_frame",
]

PARSE_ERROR = -32700
INVALID_REQUEST = -32600
METHOD_NOT_FOUND = -32601
INVALID_PARAMS = -32602
TASK_ERROR = -32000

INTERRUPTED = "tasks.cancel interrupted the task"


def result_frame(id: Any, result: Any) -> bytes:
    """`{"jsonrpc":"2.0","id":id,"result":result}` plus newline."""
    return encode({"jsonrpc": "2.0", "id": id, "result": result})


def error_frame(id: Any, code: int, message: str, data: Any = None) -> bytes:
    """`{"jsonrpc":"2.0","id":id,"error":{"code":code,"message":message}}` plus newline;
    the error gets `"data":data` after the message when `data` is not None."""
    error: dict[str, Any] = {"code": code, "message": message}
    if data is not None:
        error["data"] = data
    return encode({"jsonrpc": "2.0", "id": id, "error": error})


def request_frame(id: int | None, method: str, params: dict[str, Any]) -> bytes:
    """A request (or, with `id=None`, a notification) frame."""
    if id is None:
        return encode({"jsonrpc": "2.0", "method": method, "params": params})
    return encode({"jsonrpc": "2.0", "id": id, "method": method, "params": params})
