"""Chat Completions over Bedrock Converse, for the interception proxy: a harness's chat
request as a Converse body, a Converse response or error in chat shape, and a
ConverseStream as chat chunks as its events arrive.

The stream's binary `application/vnd.amazon.eventstream` messages are decoded with
botocore's `EventStreamBuffer` (which checks each message's CRCs); each event becomes
the chunk a streaming harness reads, and the events fold into the answer they add up
to, recorded as a chat completion.
"""

from __future__ import annotations

import contextlib
import time
from typing import Any

import orjson

from .._http import format_sse
from ._bedrock_converse import (
    FINISH,
    IMAGE_FORMATS,
    converse_body,
    converse_parse,
    converse_usage,
    takes_cache_points,
)
from ._content import image_data, is_image
from ._types import Message, ToolSpec
from ._wire import check_response

__all__ = ["ConverseStreamFold", "chat_to_converse", "converse_error", "converse_to_chat"]

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


class ConverseStreamFold:
    """Feed it the stream's bytes; it returns the chat chunks to send, as SSE frames.

    Args:
        model: the Bedrock model id, named in every chunk.
        request_id: the upstream's request id, in the chunks' `id`.
        include_usage: end with the usage chunk (the harness asked for
            `stream_options.include_usage`).
    """

    def __init__(self, model: str, request_id: str, *, include_usage: bool) -> None:
        from botocore.eventstream import (  # type: ignore[import-untyped, unused-ignore]
            EventStreamBuffer,
        )

        self._buffer = EventStreamBuffer()
        self._head = {
            "id": f"chatcmpl-{request_id}",
            "object": "chat.completion.chunk",
            "created": int(time.time()),
            "model": model,
        }
        self._include_usage = include_usage
        self._blocks: dict[int, dict[str, Any]] = {}
        self._calls: dict[int, int] = {}  # content block index -> tool call index
        self._stop: str | None = None
        self._usage: dict[str, Any] = {}
        self._request_id = request_id
        self._problem: str | None = None  # an exception event, a broken message

    def feed(self, data: bytes) -> bytes:
        """The chat chunks the events in `data` complete (`[DONE]` after the last)."""
        from botocore.eventstream import (  # type: ignore[import-untyped, unused-ignore]
            ParserError,
        )

        self._buffer.add_data(data)
        out: list[dict[str, Any] | str] = []
        try:
            for message in self._buffer:
                headers = message.headers
                payload = orjson.loads(message.payload) if message.payload else {}
                if headers.get(":message-type") != "event":
                    kind = headers.get(":exception-type") or headers.get(":error-code")
                    self._problem = f"{kind}: {payload.get('message', '')}"
                    continue
                out.extend(self._event(str(headers.get(":event-type")), payload))
        except (ParserError, orjson.JSONDecodeError) as exc:
            self._problem = f"broken event stream: {exc}"
        return b"".join(format_sse(orjson.dumps(c) if isinstance(c, dict) else c) for c in out)

    def _chunk(self, delta: dict[str, Any], finish: str | None = None) -> dict[str, Any]:
        return {**self._head, "choices": [{"index": 0, "delta": delta, "finish_reason": finish}]}

    def _event(self, kind: str, event: dict[str, Any]) -> list[dict[str, Any] | str]:
        index = event.get("contentBlockIndex")
        if kind == "messageStart":
            return [self._chunk({"role": "assistant", "content": ""})]
        if kind == "contentBlockStart" and isinstance(index, int):
            use = (event.get("start") or {}).get("toolUse") or {}
            self._blocks[index] = {"toolUse": {**use, "input": ""}}
            self._calls[index] = n = len(self._calls)
            call = {"id": use.get("toolUseId"), "type": "function"}
            function = {"name": use.get("name"), "arguments": ""}
            return [self._chunk({"tool_calls": [{"index": n, **call, "function": function}]})]
        if kind == "contentBlockDelta" and isinstance(index, int):
            return self._delta(index, event.get("delta") or {})
        if kind == "messageStop":
            self._stop = str(event.get("stopReason"))
            return [self._chunk({}, FINISH.get(self._stop, self._stop))]
        if kind == "metadata":
            self._usage = event.get("usage") or {}
            tail: list[dict[str, Any] | str] = []
            if self._include_usage:
                tail.append({**self._head, "choices": [], "usage": self._chat_usage()})
            return [*tail, "[DONE]"]
        return []  # contentBlockStop, and events chat has no word for

    def _delta(self, index: int, delta: dict[str, Any]) -> list[dict[str, Any] | str]:
        block = self._blocks.setdefault(index, {})
        if "text" in delta:
            block["text"] = block.get("text", "") + str(delta["text"])
            return [self._chunk({"content": delta["text"]})]
        if "toolUse" in delta and "toolUse" in block:
            piece = str((delta["toolUse"] or {}).get("input", ""))
            block["toolUse"]["input"] += piece
            call = {"index": self._calls[index], "function": {"arguments": piece}}
            return [self._chunk({"tool_calls": [call]})]
        thought = (delta.get("reasoningContent") or {}).get("text")
        if isinstance(thought, str):
            text = block.setdefault("reasoningContent", {"reasoningText": {"text": ""}})
            text["reasoningText"]["text"] += thought
            return [self._chunk({"reasoning_content": thought})]
        return []

    def _chat_usage(self) -> dict[str, Any]:
        usage = converse_usage({"usage": self._usage})
        return {
            "prompt_tokens": usage.input_tokens,
            "completion_tokens": usage.output_tokens,
            "total_tokens": usage.total_tokens,
            "prompt_tokens_details": {"cached_tokens": usage.cached_input_tokens},
        }

    def result(self) -> dict[str, Any] | None:
        """The chat completion the events so far add up to (None: not an answer)."""
        try:
            return converse_to_chat(self._converse(), str(self._head["model"]), self._request_id)
        except ValueError:
            return None

    def problem(self) -> str | None:
        """Why the stream, now ended, is not a usable answer; None when it is one."""
        if self._problem is not None:
            return self._problem
        if self._stop is None:
            return "the stream ended before messageStop"
        try:
            answer = converse_to_chat(self._converse(), "", self._request_id)
        except ValueError as exc:
            return str(exc)
        return check_response("chat", answer)

    def _converse(self) -> dict[str, Any]:
        """The Converse response the events so far add up to."""
        content = []
        for _, block in sorted(self._blocks.items()):
            if "toolUse" in block:
                use = dict(block["toolUse"])
                with contextlib.suppress(orjson.JSONDecodeError):  # else malformed
                    use["input"] = orjson.loads(use["input"] or "{}")
                block = {"toolUse": use}
            content.append(block)
        return {
            "output": {"message": {"role": "assistant", "content": content}},
            "stopReason": self._stop,
            "usage": self._usage,
        }
