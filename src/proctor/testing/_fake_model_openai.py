"""OpenAI Chat Completions and Responses bodies and SSE events, as the real API sends them."""

from __future__ import annotations

import itertools
from collections.abc import Callable
from typing import Any, TypeAlias

import orjson

from ._fake_model_turn import Call, Turn, groups

__all__ = ["chat_body", "chat_events", "responses_body", "responses_events"]

FINGERPRINT = "fp_fake"
Emit: TypeAlias = Callable[..., None]
_DONE = b"data: [DONE]\n\n"


def chat_usage(turn: Turn) -> dict[str, Any]:
    """Chat Completions `usage`: cached and reasoning tokens as subsets."""
    prompt_details: dict[str, int] = {"cached_tokens": turn.cached_tokens, "audio_tokens": 0}
    if turn.cache_write_tokens:
        prompt_details["cache_write_tokens"] = turn.cache_write_tokens
    return {
        "prompt_tokens": turn.input_tokens,
        "completion_tokens": turn.output_tokens,
        "total_tokens": turn.input_tokens + turn.output_tokens,
        "prompt_tokens_details": prompt_details,
        "completion_tokens_details": {
            "reasoning_tokens": turn.reasoning_tokens,
            "audio_tokens": 0,
            "accepted_prediction_tokens": 0,
            "rejected_prediction_tokens": 0,
        },
    }


def chat_body(turn: Turn) -> bytes:
    """A `chat.completion` object, with vLLM's token ids when asked."""
    message: dict[str, Any] = {
        "role": "assistant",
        "content": turn.text,
        "refusal": None,
        "annotations": [],
    }
    if turn.calls:
        message["tool_calls"] = [_chat_call(call) for call in turn.calls]
    if turn.reasoning is not None:
        message["reasoning_content"] = turn.reasoning
    choice: dict[str, Any] = {
        "index": 0,
        "message": message,
        "logprobs": None,
        "finish_reason": turn.finish,
    }
    body: dict[str, Any] = {
        "id": f"chatcmpl-{turn.id}",
        "object": "chat.completion",
        "created": turn.created,
        "model": turn.model,
        "choices": [choice],
        "usage": chat_usage(turn),
        "service_tier": "default",
        "system_fingerprint": FINGERPRINT,
    }
    _token_fields(turn, choice, turn.all_tokens)
    if turn.prompt_ids is not None:
        body["prompt_token_ids"] = turn.prompt_ids
    return orjson.dumps(body)


def chat_events(turn: Turn) -> list[bytes]:
    """`chat.completion.chunk` frames: role, content and tool-call deltas, finish, usage."""
    head = {
        "id": f"chatcmpl-{turn.id}",
        "object": "chat.completion.chunk",
        "created": turn.created,
        "model": turn.model,
        "service_tier": "default",
        "system_fingerprint": FINGERPRINT,
    }
    # Every chunk shares its envelope: render it once, splice each chunk's choices in.
    prefix = b"data: " + orjson.dumps(head)[:-1] + b',"choices":'
    tail = b',"usage":null}\n\n' if turn.include_usage else b"}\n\n"

    def frame(
        delta: dict[str, Any],
        tokens: list[str] | None = None,
        finish: str | None = None,
        extra: bytes = b"",
    ) -> bytes:
        choice = {"index": 0, "delta": delta, "logprobs": None, "finish_reason": finish}
        if tokens is not None:
            _token_fields(turn, choice, tokens)
        return prefix + orjson.dumps([choice]) + extra + tail

    prompt = b""
    if turn.prompt_ids is not None:
        prompt = b',"prompt_token_ids":' + orjson.dumps(turn.prompt_ids)
    first = {"role": "assistant", "content": "" if turn.text is not None else None, "refusal": None}
    frames = [frame(first, extra=prompt)]
    frames += [frame({"content": "".join(g)}, g) for g in groups(turn.tokens, turn.chunks)]
    for index, call in enumerate(turn.calls):
        opening = {
            "index": index,
            "id": call.call_id,
            "type": "function",
            "function": {"name": call.name, "arguments": ""},
        }
        frames.append(frame({"tool_calls": [opening]}, call.name_tokens))
        for group in groups(call.arg_tokens, turn.chunks):
            delta = {"index": index, "function": {"arguments": "".join(group)}}
            frames.append(frame({"tool_calls": [delta]}, group))
    frames.append(frame({}, finish=turn.finish))
    if turn.include_usage:
        frames.append(prefix + b'[],"usage":' + orjson.dumps(chat_usage(turn)) + b"}\n\n")
    frames.append(_DONE)
    return frames


def _chat_call(call: Call) -> dict[str, Any]:
    return {
        "id": call.call_id,
        "type": "function",
        "function": {"name": call.name, "arguments": call.arguments},
    }


def _token_fields(turn: Turn, choice: dict[str, Any], tokens: list[str]) -> None:
    """Add logprobs and vLLM `token_ids` for `tokens` to a choice, when asked."""
    if turn.top_logprobs is not None:
        choice["logprobs"] = {"content": turn.logprobs(tokens), "refusal": None}
    if turn.prompt_ids is not None:
        choice["token_ids"] = turn.token_ids(tokens)


def responses_usage(turn: Turn) -> dict[str, Any]:
    """Responses `usage`: cached and reasoning tokens as subsets."""
    return {
        "input_tokens": turn.input_tokens,
        "input_tokens_details": {
            "cached_tokens": turn.cached_tokens,
            "cache_write_tokens": turn.cache_write_tokens,
        },
        "output_tokens": turn.output_tokens,
        "output_tokens_details": {"reasoning_tokens": turn.reasoning_tokens},
        "total_tokens": turn.input_tokens + turn.output_tokens,
    }


def responses_body(turn: Turn, request: dict[str, Any]) -> bytes:
    """A `response` object, completed (or incomplete when cut by length)."""
    return orjson.dumps(_response(turn, request, final=True))


def responses_events(turn: Turn, request: dict[str, Any]) -> list[bytes]:
    """Responses frames: created, in_progress, each output item's events, completed."""
    frames: list[bytes] = []
    sequence = itertools.count()

    def emit(kind: str, **fields: Any) -> None:
        data = orjson.dumps({"type": kind, "sequence_number": next(sequence), **fields})
        frames.append(b"event: " + kind.encode() + b"\ndata: " + data + b"\n\n")

    start = _response(turn, request, final=False)
    emit("response.created", response=start)
    emit("response.in_progress", response=start)
    for index, item in enumerate(_output(turn)):
        if item["type"] == "message":
            _stream_message(turn, emit, index, item)
        elif item["type"] == "function_call":
            _stream_call(turn, emit, index, item)
        else:
            emit("response.output_item.added", output_index=index, item=item)
            emit("response.output_item.done", output_index=index, item=item)
    final = _response(turn, request, final=True)
    done = "response.completed" if final["status"] == "completed" else "response.incomplete"
    emit(done, response=final)
    return frames


def _stream_message(turn: Turn, emit: Emit, index: int, item: dict[str, Any]) -> None:
    ids = {"item_id": item["id"], "output_index": index}
    emit(
        "response.output_item.added",
        output_index=index,
        item={**item, "status": "in_progress", "content": []},
    )
    empty = {"type": "output_text", "annotations": [], "logprobs": [], "text": ""}
    emit("response.content_part.added", **ids, content_index=0, part=empty)
    for group in groups(turn.tokens, turn.chunks):
        emit(
            "response.output_text.delta",
            **ids,
            content_index=0,
            delta="".join(group),
            logprobs=_delta_logprobs(turn, group),
        )
    part = item["content"][0]
    emit(
        "response.output_text.done",
        **ids,
        content_index=0,
        text=part["text"],
        logprobs=_delta_logprobs(turn, turn.tokens),
    )
    emit("response.content_part.done", **ids, content_index=0, part=part)
    emit("response.output_item.done", output_index=index, item=item)


def _stream_call(turn: Turn, emit: Emit, index: int, item: dict[str, Any]) -> None:
    ids = {"item_id": item["id"], "output_index": index}
    emit(
        "response.output_item.added",
        output_index=index,
        item={**item, "status": "in_progress", "arguments": ""},
    )
    call = next(c for c in turn.calls if c.item_id == item["id"])
    for group in groups(call.arg_tokens, turn.chunks):
        emit("response.function_call_arguments.delta", **ids, delta="".join(group))
    emit("response.function_call_arguments.done", **ids, arguments=call.arguments)
    emit("response.output_item.done", output_index=index, item=item)


def _delta_logprobs(turn: Turn, tokens: list[str]) -> list[dict[str, Any]]:
    if turn.top_logprobs is None:
        return []
    return turn.logprobs(tokens, with_bytes=False)


def _output(turn: Turn) -> list[dict[str, Any]]:
    """The completed output items: reasoning (if any), the message, each call."""
    items: list[dict[str, Any]] = []
    if turn.reasoning_tokens:
        items.append({"id": f"rs_{turn.id}", "type": "reasoning", "summary": []})
    if turn.text:
        logprobs = turn.logprobs(turn.tokens) if turn.top_logprobs is not None else []
        text = {"type": "output_text", "annotations": [], "logprobs": logprobs, "text": turn.text}
        items.append(
            {
                "id": f"msg_{turn.id}",
                "type": "message",
                "status": "completed",
                "role": "assistant",
                "content": [text],
            }
        )
    items += [
        _computer_call(call)
        if call.native
        else {
            "id": call.item_id,
            "type": "function_call",
            "status": "completed",
            "arguments": call.arguments,
            "call_id": call.call_id,
            "name": call.name,
        }
        for call in turn.calls
    ]
    return items


def _computer_call(call: Call) -> dict[str, Any]:
    """A call of OpenAI's computer tool: its arguments are the item's action fields."""
    return {
        "id": call.item_id.replace("fc_", "cu_", 1),
        "type": "computer_call",
        "status": "completed",
        "call_id": call.call_id,
        "pending_safety_checks": [],
        **orjson.loads(call.arguments),
    }


def _response(turn: Turn, request: dict[str, Any], *, final: bool) -> dict[str, Any]:
    status, incomplete = "in_progress", None
    if final and turn.finish in ("length", "content_filter"):
        reason = "max_output_tokens" if turn.finish == "length" else "content_filter"
        status, incomplete = "incomplete", {"reason": reason}
    elif final:
        status = "completed"
    return {
        "id": f"resp_{turn.id}",
        "object": "response",
        "created_at": turn.created,
        "status": status,
        "background": False,
        "error": None,
        "incomplete_details": incomplete,
        "instructions": request.get("instructions"),
        "max_output_tokens": request.get("max_output_tokens"),
        "model": turn.model,
        "output": _output(turn) if final else [],
        "parallel_tool_calls": request.get("parallel_tool_calls", True),
        "previous_response_id": request.get("previous_response_id"),
        "reasoning": {"effort": None, "summary": None},
        "service_tier": "default",
        "store": request.get("store", True),
        "temperature": request.get("temperature", 1.0),
        "text": {"format": {"type": "text"}, "verbosity": "medium"},
        "tool_choice": request.get("tool_choice", "auto"),
        "tools": request.get("tools", []),
        "top_logprobs": request.get("top_logprobs", 0),
        "top_p": request.get("top_p", 1.0),
        "truncation": request.get("truncation", "disabled"),
        "usage": responses_usage(turn) if final else None,
        "user": None,
        "metadata": request.get("metadata", {}),
    }
