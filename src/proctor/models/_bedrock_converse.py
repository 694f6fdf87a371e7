"""Bedrock Converse shapes: chat-shaped history to a request, a response to chat shape.

A request is `system` text blocks, alternating user/assistant `messages` of content
blocks (`text`, `image` with base64 `bytes`, `toolUse`, `toolResult`), `toolConfig`
(`toolSpec`s and a `toolChoice`), `inferenceConfig`; the model id goes in the URL. A
response is `output.message`, `stopReason` and `usage` (`inputTokens` not counting
cache reads and writes, which come as `cacheReadInputTokens`/`cacheWriteInputTokens`).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import orjson

from ._content import OMITTED, image_data, is_image
from ._turns import alternating_turns
from ._types import Message, ToolCall, ToolSpec, Usage
from ._wire import arguments_object, brief, text_of, usage_cached_apart

__all__ = [
    "FINISH",
    "IMAGE_FORMATS",
    "MAX_IMAGES_PER_MESSAGE",
    "MAX_IMAGE_BYTES",
    "converse_body",
    "converse_check",
    "converse_parse",
    "converse_usage",
    "takes_cache_points",
]

IMAGE_FORMATS = {"image/png": "png", "image/jpeg": "jpeg", "image/gif": "gif", "image/webp": "webp"}
"""Media types Converse takes, and their `format` names."""
_INFERENCE = {
    "max_tokens": "maxTokens",
    "max_completion_tokens": "maxTokens",
    "temperature": "temperature",
    "top_p": "topP",
    "stop": "stopSequences",
}
_CACHE_POINT = {"cachePoint": {"type": "default"}}
MAX_IMAGES_PER_MESSAGE = 20
MAX_IMAGE_BYTES = 3_750_000
"""Converse's documented limits: at most 20 images in a message, each at most 3.75 MB
(taken as decimal megabytes, the smaller reading)."""

FINISH = {
    "end_turn": "stop",
    "stop_sequence": "stop",
    "tool_use": "tool_calls",
    "max_tokens": "length",
    "model_context_window_exceeded": "length",
    "guardrail_intervened": "content_filter",
    "content_filtered": "content_filter",
}
"""Converse stop reasons in chat vocabulary; `malformed_*` ones are malformed answers."""


def takes_cache_points(model_id: str) -> bool:
    """Whether a Bedrock model takes `cachePoint` blocks (Claude and Nova)."""
    return "anthropic.claude" in model_id or "amazon.nova" in model_id


def converse_body(
    messages: list[Message],
    tools: Sequence[ToolSpec],
    params: dict[str, Any],
    *,
    cache: bool,
) -> dict[str, Any]:
    """The `POST /model/{modelId}/converse` body.

    Chat parameters map to `inferenceConfig` (`max_tokens`, `temperature`, `top_p`,
    `stop`) and `tool_choice` to `toolChoice` (`required` is `any`, a named function
    `tool`); any other parameter goes to `additionalModelRequestFields` (e.g. Claude's
    `thinking`). `cache` adds `cachePoint` blocks after the system prompt, the tools
    and the last user turn.

    A message holding more than `MAX_IMAGES_PER_MESSAGE` images keeps the newest ones;
    the older ones become the text `[frame omitted]`, as compaction leaves them.

    Raises:
        ValueError: an image given by URL (Converse takes bytes), or one over
            `MAX_IMAGE_BYTES`.
    """
    system, turns = converse_messages(messages)
    for turn in turns:
        _within_image_count(turn["content"])
    body: dict[str, Any] = {"messages": turns}
    if system:
        body["system"] = system + ([_CACHE_POINT] if cache else [])
    inference: dict[str, Any] = {}
    for name, field in _INFERENCE.items():
        if name in params and params[name] is not None:
            value = params.pop(name)
            inference[field] = (
                [value] if field == "stopSequences" and isinstance(value, str) else value
            )
        params.pop(name, None)
    if inference:
        body["inferenceConfig"] = inference
    choice = _tool_choice(params.pop("tool_choice", None))
    if tools and choice is not None:
        specs: list[dict[str, Any]] = [{"toolSpec": _tool(t)} for t in tools]
        body["toolConfig"] = {"tools": specs + ([_CACHE_POINT] if cache else [])}
        if choice:
            body["toolConfig"]["toolChoice"] = choice
    if cache and turns and turns[-1]["role"] == "user":
        turns[-1]["content"].append(_CACHE_POINT)
    if params:
        body["additionalModelRequestFields"] = params
    return body


def _tool(tool: ToolSpec) -> dict[str, Any]:
    spec: dict[str, Any] = {"name": tool.name, "inputSchema": {"json": tool.parameters}}
    if tool.description:
        spec["description"] = tool.description
    return spec


def _tool_choice(choice: Any) -> dict[str, Any] | None:
    """Converse's `toolChoice` for a chat or Anthropic one: {} for the default (auto),
    None for `none` (no tools are sent)."""
    if choice is None or choice == "auto":
        return {}
    if choice == "none":
        return None
    if choice in ("required", "any"):
        return {"any": {}}
    if isinstance(choice, dict):
        function = choice.get("function")
        name = (function if isinstance(function, dict) else choice).get("name")
        if isinstance(name, str) and name:
            return {"tool": {"name": name}}
        if choice.get("type") in ("any", "required"):
            return {"any": {}}
        if choice.get("type") == "auto":
            return {}
    raise ValueError(f"tool_choice {choice!r} has no Converse equivalent")


def converse_messages(messages: list[Message]) -> tuple[list[dict[str, Any]], list[Message]]:
    """Chat messages as Converse `system` blocks and alternating turns (fresh dicts)."""
    return alternating_turns(
        messages,
        system=lambda text: {"text": text},
        assistant=_assistant_blocks,
        tool=_tool_result,
        user=_user_blocks,
        empty_turns=False,  # Converse refuses an empty content list
    )


def _assistant_blocks(message: Message) -> list[dict[str, Any]]:
    blocks = [dict(b) for b in message.get("thinking_blocks") or [] if "reasoningContent" in b]
    text = text_of(message.get("content"))
    if text:
        blocks.append({"text": text})
    for call in message.get("tool_calls") or []:
        fn = call.get("function") or {}
        blocks.append(
            {
                "toolUse": {
                    "toolUseId": call.get("id"),
                    "name": fn.get("name"),
                    "input": arguments_object(fn.get("arguments")),
                }
            }
        )
    return blocks


def _tool_result(message: Message) -> dict[str, Any]:
    content = message.get("content")
    blocks = _user_blocks(content) if isinstance(content, list) else []
    if not isinstance(content, list):
        blocks = [{"text": str(content) if content else "(no output)"}]
    result = {"toolUseId": message.get("tool_call_id"), "content": blocks or [{"text": ""}]}
    return {"toolResult": result}


def _user_blocks(content: Any) -> list[dict[str, Any]]:
    if not isinstance(content, list):
        return [{"text": str(content)}] if content else []
    blocks = []
    for part in content:
        kind = part.get("type") if isinstance(part, dict) else None
        if kind == "text":
            if part.get("text"):
                blocks.append({"text": part["text"]})
        elif is_image(part):
            blocks.append(_image(part))
    return blocks


def _image(part: dict[str, Any]) -> dict[str, Any]:
    data = image_data(part)
    if data is None:
        raise ValueError("Bedrock Converse takes images as bytes, not by URL")
    media_type, b64 = data
    fmt = IMAGE_FORMATS.get(media_type)
    if fmt is None:
        raise ValueError(f"Bedrock Converse takes png, jpeg, gif or webp, not {media_type}")
    size = len(b64) * 3 // 4 - b64.count("=", -2)
    if size > MAX_IMAGE_BYTES:
        raise ValueError(
            f"Bedrock Converse takes images of at most 3.75 MB, not {size / 1e6:.2f} MB:"
            " send a smaller or scaled frame (e.g. JPEG)"
        )
    return {"image": {"format": fmt, "source": {"bytes": b64}}}


def _within_image_count(blocks: list[dict[str, Any]]) -> None:
    """Replace the oldest image blocks of one message (tool results' included) past
    `MAX_IMAGES_PER_MESSAGE` with the compaction's placeholder text."""
    slots: list[tuple[list[dict[str, Any]], int]] = []
    for i, block in enumerate(blocks):
        if "image" in block:
            slots.append((blocks, i))
        elif "toolResult" in block:
            inner = block["toolResult"]["content"]
            slots += [(inner, k) for k, b in enumerate(inner) if "image" in b]
    for seq, i in slots[: max(0, len(slots) - MAX_IMAGES_PER_MESSAGE)]:
        seq[i] = {"text": OMITTED}


# -- responses ----------------------------------------------------------------------------


def _dict(value: Any) -> dict[str, Any]:
    return value if isinstance(value, dict) else {}


_USAGE = ("inputTokens", "cacheReadInputTokens", "cacheWriteInputTokens", "outputTokens")
"""Converse's usage keys, as `usage_cached_apart` takes them."""


def converse_usage(body: Any) -> Usage:
    """Token counts of a Converse response; cache reads and writes count as input."""
    return usage_cached_apart(_dict(_dict(body).get("usage")), _USAGE, _count)


def _count(value: Any) -> int:
    return value if isinstance(value, int) and not isinstance(value, bool) and value > 0 else 0


def converse_parse(body: Any) -> tuple[dict[str, Any], str | None, list[ToolCall], str | None]:
    """(assistant message in chat shape, text, tool calls, finish reason).

    Raises:
        ValueError: the body is not a usable answer (the message says why).
    """
    message = _dict(_dict(_dict(body).get("output")).get("message"))
    blocks = message.get("content")
    if not isinstance(blocks, list):
        raise ValueError(f"no output.message.content in the response: {brief(body)}")
    reason = _dict(body).get("stopReason")
    if isinstance(reason, str) and reason.startswith("malformed"):
        raise ValueError(f"stop reason {reason}")
    texts: list[str] = []
    thinking: list[dict[str, Any]] = []
    calls: list[ToolCall] = []
    for block in blocks:
        block = _dict(block)
        if isinstance(block.get("text"), str):
            texts.append(block["text"])
        elif "toolUse" in block:
            calls.append(_call(_dict(block["toolUse"])))
        elif "reasoningContent" in block:
            thinking.append(block)
    content = "".join(texts) or None
    out: dict[str, Any] = {"role": "assistant", "content": content}
    if calls:
        out["tool_calls"] = [
            {
                "id": c.id,
                "type": "function",
                "function": {"name": c.name, "arguments": c.raw_arguments},
            }
            for c in calls
        ]
    if thinking:
        out["thinking_blocks"] = thinking
        text = "".join(
            str(_dict(_dict(b["reasoningContent"]).get("reasoningText")).get("text", ""))
            for b in thinking
        )
        if text:
            out["reasoning_content"] = text
    finish = FINISH.get(reason, reason) if isinstance(reason, str) else None
    return out, content, calls, finish


def _call(use: dict[str, Any]) -> ToolCall:
    name, call_id, arguments = use.get("name"), use.get("toolUseId"), use.get("input")
    if not isinstance(name, str) or not name:
        raise ValueError("toolUse without a name")
    if not isinstance(call_id, str) or not call_id:
        raise ValueError(f"toolUse {name!r} without a toolUseId")
    if not isinstance(arguments, dict):
        raise ValueError(f"toolUse {name!r} input is not an object")
    return ToolCall(call_id, name, arguments, orjson.dumps(arguments).decode())


def converse_check(body: Any, *, require_tool_call: bool) -> str | None:
    """None when `body` is a usable answer, else why not."""
    try:
        _, _, calls, finish = converse_parse(body)
    except ValueError as exc:
        return str(exc)
    if finish == "tool_calls" and not calls:
        return "stop reason says tool_use, but the response has no toolUse"
    if require_tool_call and not calls:
        return "no tool call"
    return None
