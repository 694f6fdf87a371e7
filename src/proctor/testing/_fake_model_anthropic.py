"""Anthropic Messages bodies and SSE events, as the real API sends them."""

from __future__ import annotations

from typing import Any

import orjson

from ._fake_model_turn import Turn, compacting, groups

__all__ = ["compaction_problem", "messages_body", "messages_events"]

COMPACTION_BETA = "compact-2026-01-12"

_STOP = {
    "stop": "end_turn",
    "length": "max_tokens",
    "tool_calls": "tool_use",
    "content_filter": "refusal",
}


def messages_usage(turn: Turn, output_tokens: int) -> dict[str, Any]:
    """Anthropic `usage`: `input_tokens` excludes the tokens read from or written to cache."""
    usage: dict[str, Any] = {
        "input_tokens": max(0, turn.input_tokens - turn.cached_tokens - turn.cache_write_tokens),
        "cache_creation_input_tokens": turn.cache_write_tokens,
        "cache_read_input_tokens": turn.cached_tokens,
        "cache_creation": {
            "ephemeral_5m_input_tokens": turn.cache_write_tokens,
            "ephemeral_1h_input_tokens": 0,
        },
        "output_tokens": output_tokens,
        "service_tier": "standard",
    }
    if turn.reasoning_tokens:
        usage["output_tokens_details"] = {"thinking_tokens": turn.reasoning_tokens}
    return usage


def messages_body(turn: Turn) -> bytes:
    """A `message` object with its text and tool_use blocks."""
    message = _message(turn)
    message["content"] = _blocks(turn)
    if turn.compaction is not None:
        message["content"].insert(0, {"type": "compaction", "content": turn.compaction})
    message["stop_reason"] = _STOP.get(turn.finish, turn.finish)
    message["usage"] = messages_usage(turn, turn.output_tokens)
    return orjson.dumps(message)


def messages_events(turn: Turn) -> list[bytes]:
    """message_start, each block's start/deltas/stop (a ping after the first), message_delta
    with the usage, message_stop."""
    frames: list[bytes] = []

    def emit(kind: str, **fields: Any) -> None:
        data = orjson.dumps({"type": kind, **fields})
        frames.append(b"event: " + kind.encode() + b"\ndata: " + data + b"\n\n")

    emit("message_start", message={**_message(turn), "usage": messages_usage(turn, 1)})
    for index, block in enumerate(_blocks(turn)):
        if block["type"] == "text":
            emit("content_block_start", index=index, content_block={**block, "text": ""})
            deltas = [
                {"type": "text_delta", "text": "".join(g)} for g in groups(turn.tokens, turn.chunks)
            ]
        else:
            emit("content_block_start", index=index, content_block={**block, "input": {}})
            call = turn.calls[index - (1 if turn.text else 0)]
            deltas = [{"type": "input_json_delta", "partial_json": ""}]
            deltas += [
                {"type": "input_json_delta", "partial_json": "".join(g)}
                for g in groups(call.arg_tokens, turn.chunks)
            ]
        if index == 0:
            emit("ping")
        for delta in deltas:
            emit("content_block_delta", index=index, delta=delta)
        emit("content_block_stop", index=index)
    usage = messages_usage(turn, turn.output_tokens)
    del usage["cache_creation"], usage["service_tier"]
    stop = {"stop_reason": _STOP.get(turn.finish, turn.finish), "stop_sequence": None}
    emit("message_delta", delta=stop, usage=usage)
    emit("message_stop")
    return frames


def _message(turn: Turn) -> dict[str, Any]:
    return {
        "id": f"msg_{turn.id}",
        "type": "message",
        "role": "assistant",
        "model": turn.model,
        "content": [],
        "stop_reason": None,
        "stop_sequence": None,
    }


def _blocks(turn: Turn) -> list[dict[str, Any]]:
    blocks: list[dict[str, Any]] = [{"type": "text", "text": turn.text}] if turn.text else []
    for call in turn.calls:
        blocks.append(
            {
                "type": "tool_use",
                "id": call.call_id,
                "name": call.name,
                "input": _input(call.arguments),
            }
        )
    return blocks


def _input(arguments: str) -> Any:
    """The call's input object; broken JSON (a scripted fault) is passed on as the string."""
    try:
        value = orjson.loads(arguments)
    except orjson.JSONDecodeError:
        return arguments
    return value if isinstance(value, dict) else arguments


def compaction_problem(beta: str | None, body: Any) -> str | None:
    """What the Messages API refuses about server-side compaction in a request: the
    edit or a replayed `compaction` block without the beta header, a trigger under
    50,000 tokens, a block outside an assistant turn or without its summary."""
    blocks = [
        (message.get("role"), block)
        for message in body.get("messages") or ()
        if isinstance(message, dict) and isinstance(message.get("content"), list)
        for block in message["content"]
        if isinstance(block, dict) and block.get("type") == "compaction"
    ]
    if not compacting(body) and not blocks:
        return None
    betas = {b.strip() for b in (beta or "").split(",")}
    if COMPACTION_BETA not in betas:
        return f"context_management compaction requires the beta header {COMPACTION_BETA}."
    for edit in body.get("context_management", {}).get("edits") or ():
        value = (edit.get("trigger") or {}).get("value") if isinstance(edit, dict) else None
        if isinstance(value, int) and value < 50_000:
            return "context_management.edits.0.trigger.value: must be at least 50000."
    for role, block in blocks:
        if role != "assistant" or not isinstance(block.get("content"), str):
            return "messages: a compaction block goes in an assistant turn, with its content."
    return None
