"""Converse as the fake Bedrock speaks it: what it refuses, and a turn as a response."""

from __future__ import annotations

import base64
import binascii
from typing import Any

import orjson

from .._http import Response
from ._fake_model_turn import Turn

__all__ = ["STOP_REASONS", "aws_error", "converse_body", "converse_problem", "converse_usage"]

STOP_REASONS = {
    "stop": "end_turn",
    "tool_calls": "tool_use",
    "length": "max_tokens",
    "content_filter": "content_filtered",
}
"""Chat finish reasons as Converse stop reasons."""
_MAGIC = {
    "png": (b"\x89PNG\r\n\x1a\n",),
    "jpeg": (b"\xff\xd8\xff",),
    "gif": (b"GIF87a", b"GIF89a"),
    "webp": (b"RIFF",),
}
_BLOCKS = frozenset(("text", "image", "toolUse", "toolResult", "cachePoint", "reasoningContent"))
# status -> AWS error type, as Bedrock runtime names them
_TYPES = {
    400: "ValidationException",
    403: "AccessDeniedException",
    404: "ResourceNotFoundException",
    408: "ModelTimeoutException",
    413: "ValidationException",
    424: "ModelErrorException",
    429: "ThrottlingException",
    500: "InternalServerException",
    503: "ServiceUnavailableException",
}


def aws_error(
    status: int,
    message: str,
    kind: str | None = None,
    headers: tuple[tuple[str, str], ...] = (),
) -> Response:
    """An AWS JSON error: the type in `x-amzn-ErrorType`, `{"message": ...}`."""
    kind = kind or _TYPES.get(
        status, "InternalServerException" if status >= 500 else "ValidationException"
    )
    fields = [("content-type", "application/json"), ("x-amzn-errortype", f"{kind}:"), *headers]
    return Response(status, fields, orjson.dumps({"message": message}))


def converse_problem(body: Any, models: set[str], model: str) -> str | None:
    """The ValidationException Bedrock would answer for this request, or None."""
    if model not in models:
        return "The provided model identifier is invalid."
    if not isinstance(body, dict):
        return "The request body is not a JSON object."
    messages = body.get("messages")
    if not isinstance(messages, list) or not messages:
        return "A conversation must start with a user message."
    if messages[0].get("role") != "user":
        return "A conversation must start with a user message."
    uses: set[str] = set()
    for i, message in enumerate(messages):
        if i and message.get("role") == messages[i - 1].get("role"):
            return "A conversation must alternate between user and assistant roles."
        content = message.get("content")
        if not isinstance(content, list) or not content:
            return f"messages.{i}.content: the content field in the message is empty."
        for block in content:
            problem = _block_problem(i, block, uses)
            if problem:
                return problem
        if _images_in(content) > 20:
            return f"messages.{i}: a message can include up to 20 images."
    return _tool_config_problem(body.get("toolConfig"))


def _images_in(content: list[Any]) -> int:
    inner = [b["toolResult"].get("content") or [] for b in content if "toolResult" in b]
    return sum("image" in b for b in content) + sum("image" in b for r in inner for b in r)


def _block_problem(i: int, block: Any, uses: set[str]) -> str | None:
    keys = set(block) if isinstance(block, dict) else set()
    if len(keys) != 1 or not keys <= _BLOCKS:
        return f"messages.{i}.content: a content block holds exactly one known member."
    if "toolUse" in block:
        uses.add(str(block["toolUse"].get("toolUseId")))
    if "toolResult" in block:
        result = block["toolResult"]
        if result.get("toolUseId") not in uses:
            return f"messages.{i}: toolResult {result.get('toolUseId')!r} answers no toolUse."
        for inner in result.get("content") or ():
            if isinstance(inner, dict) and "image" in inner:
                problem = _image_problem(i, inner["image"])
                if problem:
                    return problem
    if "image" in block:
        return _image_problem(i, block["image"])
    return None


def _image_problem(i: int, image: Any) -> str | None:
    fmt = image.get("format") if isinstance(image, dict) else None
    if fmt not in _MAGIC:
        return f"messages.{i}: image format must be one of png, jpeg, gif, webp."
    data = (image.get("source") or {}).get("bytes")
    try:
        raw = base64.b64decode(data or "", validate=True)
    except (binascii.Error, TypeError, ValueError):
        return f"messages.{i}: image bytes are not valid base64."
    if not raw.startswith(_MAGIC[fmt]):
        return f"messages.{i}: the image bytes are not a {fmt} image."
    if len(raw) > 3_932_160:
        return f"messages.{i}: the image size must be no more than 3.75 MB."
    return None


def _tool_config_problem(config: Any) -> str | None:
    if config is None:
        return None
    tools = [t["toolSpec"] for t in config.get("tools") or () if "toolSpec" in t]
    if not tools:
        return "toolConfig.tools must hold at least one toolSpec."
    for tool in tools:
        if not isinstance((tool.get("inputSchema") or {}).get("json"), dict):
            return f"toolSpec {tool.get('name')!r}: inputSchema.json is required."
    forced = ((config.get("toolChoice") or {}).get("tool") or {}).get("name")
    if forced is not None and forced not in {t.get("name") for t in tools}:
        return f"toolChoice names {forced!r}, which is not in toolConfig.tools."
    return None


def converse_body(turn: Turn, *, missing_calls: bool = False) -> bytes:
    """`turn` as a Converse response (`missing_calls`: says tool_use, carries none)."""
    content: list[dict[str, Any]] = []
    if turn.reasoning:
        content.append({"reasoningContent": {"reasoningText": {"text": turn.reasoning}}})
    if turn.text:
        content.append({"text": turn.text})
    if not missing_calls:
        for call in turn.calls:
            arguments = orjson.loads(call.arguments) if call.arguments else {}
            content.append(
                {"toolUse": {"toolUseId": call.call_id, "name": call.name, "input": arguments}}
            )
    stop = "tool_use" if missing_calls else STOP_REASONS.get(turn.finish, turn.finish)
    body = {
        "output": {"message": {"role": "assistant", "content": content}},
        "stopReason": stop,
        "usage": converse_usage(turn),
        "metrics": {"latencyMs": 1},
    }
    return orjson.dumps(body)


def converse_usage(turn: Turn) -> dict[str, int]:
    """Converse's usage: `inputTokens` without the cache reads and writes."""
    fresh = max(0, turn.input_tokens - turn.cached_tokens - turn.cache_write_tokens)
    usage = {
        "inputTokens": fresh,
        "outputTokens": turn.output_tokens,
        "totalTokens": turn.input_tokens + turn.output_tokens,
    }
    if turn.cached_tokens:
        usage["cacheReadInputTokens"] = turn.cached_tokens
    if turn.cache_write_tokens:
        usage["cacheWriteInputTokens"] = turn.cache_write_tokens
    return usage
