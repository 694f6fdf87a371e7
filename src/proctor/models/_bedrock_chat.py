"""Chat Completions over Bedrock Converse, for the interception proxy: a harness's chat
request as a Converse body, a Converse response or error in chat shape (a stream's
chunks: `_bedrock_stream`)."""

from __future__ import annotations

import time
from typing import Any

import orjson

from ._bedrock_converse import (
    IMAGE_FORMATS,
    converse_body,
    converse_parse,
    converse_usage,
    takes_cache_points,
)
from ._content import image_data, is_image
from ._types import Message, ToolSpec

__all__ = ["chat_to_converse", "converse_error", "converse_to_chat"]

# Chat parameters Converse has a field for; the rest of a harness's request (`n`,
# `user`, `stream_options`, `response_format`, ...) has no Converse equivalent.
_KEPT = ("max_tokens", "max_completion_tokens", "temperature", "top_p", "stop", "tool_choice")


_NOT_SENT = "[an image Converse cannot take was left out: it takes png, jpeg, gif or webp bytes]"


def chat_to_converse(body: dict[str, Any], model: str) -> dict[str, Any]:
    """A Chat Completions request body as the Converse body for Bedrock model `model`.

    What Converse has no field for is left out: an image by URL or of another type
    becomes a note, a `tool_choice` it cannot say is the default; Bedrock judges the rest.
    """
    tools = [
        ToolSpec(
            str(fn.get("name", "")),
            str(fn.get("description") or ""),
            fn.get("parameters") or {"type": "object", "properties": {}},
        )
        for tool in body.get("tools") or ()
        if isinstance(tool, dict) and isinstance(fn := tool.get("function"), dict)
    ]
    params = {k: body[k] for k in _KEPT if body.get(k) is not None}
    try:
        converse_body([], tools, {"tool_choice": params.get("tool_choice")}, cache=False)
    except ValueError:
        params.pop("tool_choice")
    messages = [_sendable(m) for m in body.get("messages") or () if isinstance(m, dict)]
    return converse_body(messages, tools, params, cache=takes_cache_points(model))


def _sendable(message: Message) -> Message:
    content = message.get("content")
    if not isinstance(content, list):
        return message
    parts = [
        {"type": "text", "text": _NOT_SENT} if is_image(p) and not _inline(p) else p
        for p in content
    ]
    return {**message, "content": parts}


def _inline(part: dict[str, Any]) -> bool:
    try:
        data = image_data(part)
    except ValueError:
        return False
    return data is not None and data[0] in IMAGE_FORMATS


def converse_to_chat(body: Any, model: str, request_id: str) -> dict[str, Any]:
    """A Converse response as a chat completion (`model` the Bedrock model id).

    Raises:
        ValueError: the response is not a usable Converse answer.
    """
    message, _, _, finish = converse_parse(body)
    message.pop("thinking_blocks", None)  # Converse's own reasoning blocks: not chat's
    usage = converse_usage(body)
    return {
        "id": f"chatcmpl-{request_id}",
        "object": "chat.completion",
        "created": int(time.time()),
        "model": model,
        "choices": [{"index": 0, "message": message, "finish_reason": finish}],
        "usage": {
            "prompt_tokens": usage.input_tokens,
            "completion_tokens": usage.output_tokens,
            "total_tokens": usage.total_tokens,
            "prompt_tokens_details": {"cached_tokens": usage.cached_input_tokens},
        },
    }


def converse_error(status: int, data: bytes, kind: str) -> bytes:
    """An AWS error body (`{"message": ...}`, its type from `x-amzn-ErrorType`) in the
    OpenAI error shape a chat harness reads."""
    try:
        body = orjson.loads(data)
    except orjson.JSONDecodeError:
        body = None
    message = body.get("message") if isinstance(body, dict) else None
    code = kind.partition(":")[0] or None
    error = {
        "message": str(message or data.decode(errors="replace")[:200] or f"HTTP {status}"),
        "type": "invalid_request_error" if status < 500 else "server_error",
        "param": None,
        "code": code,
    }
    return orjson.dumps({"error": error})
