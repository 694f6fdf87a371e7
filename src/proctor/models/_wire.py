"""Raw provider JSON: usage, validity, the assistant message, and folding SSE streams.

One code path for the adapters and the proxy's recorder. `api` is `chat` (OpenAI Chat
Completions and compatible servers), `responses` (OpenAI Responses) or `messages`
(Anthropic Messages).
"""

from __future__ import annotations

from collections.abc import Callable, Collection
from typing import Any, NamedTuple, Protocol

import orjson

from ._types import ToolCall, Usage

__all__ = [
    "Parsed",
    "StreamAccumulator",
    "check_response",
    "checked",
    "parse_response",
    "usage_cached_apart",
    "usage_from",
]


class Parsed(NamedTuple):
    """An answer in chat shape."""

    message: dict[str, Any]
    content: str | None
    tool_calls: list[ToolCall]
    finish_reason: str | None


def _int(value: Any) -> int:
    return value if isinstance(value, int) and not isinstance(value, bool) else 0


def _dict(value: Any) -> dict[str, Any]:
    return value if isinstance(value, dict) else {}


_MESSAGES_USAGE = (
    "input_tokens",
    "cache_read_input_tokens",
    "cache_creation_input_tokens",
    "output_tokens",
)
"""Anthropic's usage keys, as `usage_cached_apart` takes them."""


def usage_cached_apart(
    usage: dict[str, Any], keys: tuple[str, str, str, str], count: Callable[[Any], int]
) -> Usage:
    """The token counts of an API that counts cache reads and writes apart from its
    input (Anthropic Messages, Bedrock Converse): the input is their sum.

    `keys` name the uncached input, the cache reads, the cache writes and the output in
    `usage`; `count` reads each value (zero for a missing or odd one).
    """
    uncached, reads, writes, output = keys
    read = count(usage.get(reads))
    write = count(usage.get(writes))
    return Usage(
        input_tokens=count(usage.get(uncached)) + read + write,
        cached_input_tokens=read,
        cache_write_tokens=write,
        output_tokens=count(usage.get(output)),
    )


def usage_from(api: str, body: Any) -> Usage:
    """The token counts of a response body; zeros for whatever is missing."""
    u = _dict(_dict(body).get("usage"))
    if api == "messages":
        return usage_cached_apart(u, _MESSAGES_USAGE, _int)
    if api == "responses":
        return Usage(
            input_tokens=_int(u.get("input_tokens")),
            cached_input_tokens=_int(_dict(u.get("input_tokens_details")).get("cached_tokens")),
            output_tokens=_int(u.get("output_tokens")),
            reasoning_tokens=_int(_dict(u.get("output_tokens_details")).get("reasoning_tokens")),
        )
    cached = _int(_dict(u.get("prompt_tokens_details")).get("cached_tokens"))
    return Usage(
        input_tokens=_int(u.get("prompt_tokens")),
        cached_input_tokens=cached or _int(u.get("prompt_cache_hit_tokens")),  # DeepSeek
        output_tokens=_int(u.get("completion_tokens")),
        reasoning_tokens=_int(_dict(u.get("completion_tokens_details")).get("reasoning_tokens")),
    )


class _Malformed(ValueError):
    """A response body that is not a usable answer; the message says why."""


def check_response(
    api: str,
    body: Any,
    *,
    require_tool_call: bool = False,
    tool_names: Collection[str] | None = None,
) -> str | None:
    """None when `body` is a usable answer, else a short description of the problem.

    Args:
        api: `chat`, `responses` or `messages`.
        body: the decoded JSON.
        require_tool_call: an answer without a tool call is a problem.
        tool_names: when given, a call to any other tool is a problem.
    """
    parsed = checked(api, body)
    if isinstance(parsed, str):
        return parsed
    for call in parsed.tool_calls:
        if tool_names is not None and call.name not in tool_names:
            return f"call to unknown tool {call.name!r}"
    if require_tool_call and not parsed.tool_calls:
        return "no tool call"
    return None


def checked(api: str, body: Any) -> Parsed | str:
    """`check_response` (without its options) that hands back the answer it parsed:
    the answer when `body` is usable, else the problem."""
    try:
        parsed = parse_response(api, body)
    except _Malformed as exc:
        return str(exc)
    return _missing_calls(api, body, parsed) or parsed


def _missing_calls(api: str, body: dict[str, Any], parsed: Parsed) -> str | None:
    """A response that ended to call tools but carries none, or that says nothing at all.

    Chat's `finish_reason: "tool_calls"` and Anthropic's `stop_reason: "tool_use"` (both
    `tool_calls` once parsed) promise calls. Responses names no reason: there, a
    completed response without a message or a function call is the same empty turn.
    """
    if parsed.tool_calls:
        return None
    if parsed.finish_reason == "tool_calls":
        return "finish reason says tool calls, but the response has none"
    if api == "responses" and body.get("status") == "completed":
        kinds = {_dict(item).get("type") for item in body["output"]}
        if not kinds & {"message", "function_call", "computer_call"}:
            return "completed response with neither a message nor a tool call"
    return None


def parse_response(api: str, body: Any) -> Parsed:
    """The assistant message of a response body, in chat shape.

    Raises:
        ValueError: the body is not a usable answer (the message says why).
    """
    if not isinstance(body, dict):
        raise _Malformed("response is not a JSON object")
    if body.get("error"):
        raise _Malformed(f"error in response: {brief(body['error'])}")
    if api == "messages":
        return _parse_messages(body)
    if api == "responses":
        return _parse_responses(body)
    return _parse_chat(body)


def text_of(content: Any) -> str:
    """A message's content as text: parts' texts joined, None as empty."""
    if isinstance(content, list):
        return "".join(str(_dict(p).get("text") or "") for p in content)
    return "" if content is None else str(content)


def arguments_object(arguments: Any) -> dict[str, Any]:
    """A history's tool-call arguments (a dict, or its JSON) as an object; `{}` when
    they are not one: a request body is built from them, whatever the model sent."""
    if isinstance(arguments, dict):
        return arguments
    try:
        value = orjson.loads(arguments or "{}")
    except orjson.JSONDecodeError:
        return {}
    return value if isinstance(value, dict) else {}


def brief(value: Any, limit: int = 200) -> str:
    try:
        text = value if isinstance(value, str) else orjson.dumps(value).decode()
    except TypeError:  # not JSON-able as orjson sees it (e.g. an int beyond 64 bits)
        text = repr(value)
    return text if len(text) <= limit else text[:limit] + "..."


def _arguments(raw: Any) -> tuple[dict[str, Any], str]:
    if isinstance(raw, dict):
        return raw, orjson.dumps(raw).decode()
    if not isinstance(raw, str):
        raise _Malformed("tool call arguments are not a JSON string")
    if not raw.strip():
        return {}, raw
    try:
        value = orjson.loads(raw)
    except orjson.JSONDecodeError:
        raise _Malformed("tool call arguments are not JSON") from None
    if not isinstance(value, dict):
        raise _Malformed("tool call arguments are not a JSON object")
    return value, raw


def _tool_call(call_id: Any, name: Any, raw: Any) -> ToolCall:
    if not isinstance(name, str) or not name:
        raise _Malformed("tool call without a name")
    if not isinstance(call_id, str) or not call_id:
        raise _Malformed(f"tool call {name!r} without an id")
    arguments, text = _arguments(raw)
    return ToolCall(id=call_id, name=name, arguments=arguments, raw_arguments=text)


def _message(content: str | None, calls: list[ToolCall]) -> dict[str, Any]:
    message: dict[str, Any] = {"role": "assistant", "content": content}
    if calls:
        message["tool_calls"] = [
            {
                "id": c.id,
                "type": "function",
                "function": {"name": c.name, "arguments": c.raw_arguments or "{}"},
            }
            for c in calls
        ]
    return message


def _parse_chat(body: dict[str, Any]) -> Parsed:
    choices = body.get("choices")
    if not isinstance(choices, list) or not choices:
        raise _Malformed("no choices")
    choice = _dict(choices[0])
    msg = choice.get("message")
    if not isinstance(msg, dict):
        raise _Malformed("no message in the first choice")
    content = msg.get("content")
    if isinstance(content, list):
        content = text_of(content)
    if content is not None and not isinstance(content, str):
        raise _Malformed("message content is neither text nor parts")
    raw_calls = msg.get("tool_calls") or []
    if not isinstance(raw_calls, list):
        raise _Malformed("tool_calls is not a list")
    calls = []
    for raw in raw_calls:
        fn = _dict(_dict(raw).get("function"))
        calls.append(_tool_call(_dict(raw).get("id"), fn.get("name"), fn.get("arguments", "")))
    finish = choice.get("finish_reason")
    message = _message(content, calls)
    if isinstance(msg.get("reasoning_content"), str) and msg["reasoning_content"]:
        # A reasoning model continues from it: it goes back with its tool calls.
        message["reasoning_content"] = msg["reasoning_content"]
    return Parsed(message, content, calls, finish if isinstance(finish, str) else None)


_INCOMPLETE = {"max_output_tokens": "length", "content_filter": "content_filter"}


def _parse_responses(body: dict[str, Any]) -> Parsed:
    output = body.get("output")
    if not isinstance(output, list):
        raise _Malformed("no output")
    if body.get("status") == "failed":
        raise _Malformed("response failed")
    texts: list[str] = []
    calls: list[ToolCall] = []
    computer: dict[str, dict[str, Any]] = {}  # call id -> what the reply item must echo
    for item in map(_dict, output):
        if item.get("type") == "message":
            for part in map(_dict, item.get("content") or []):
                if part.get("type") == "output_text" and isinstance(part.get("text"), str):
                    texts.append(part["text"])
        elif item.get("type") == "function_call":
            calls.append(
                _tool_call(item.get("call_id"), item.get("name"), item.get("arguments", ""))
            )
        elif item.get("type") == "computer_call":
            calls.append(_computer_call(item, computer))
    content = "".join(texts) if texts else None
    if body.get("status") == "incomplete":
        reason = _dict(body.get("incomplete_details")).get("reason")
        finish = _INCOMPLETE.get(str(reason), str(reason))
    else:
        finish = "tool_calls" if calls else "stop"
    message = _message(content, calls)
    for entry in message.get("tool_calls") or ():
        if entry["id"] in computer:
            entry["type"] = "computer_call"
            entry["computer_call"] = computer[entry["id"]]
    return Parsed(message, content, calls, finish)


def _computer_call(item: dict[str, Any], seen: dict[str, dict[str, Any]]) -> ToolCall:
    """A Responses `computer_call` (OpenAI's computer tool) as a call of tool `computer`
    whose arguments are its `action` (preview) or `actions` (batched); its item id and
    safety checks ride on the chat-shaped call, for the `computer_call_output`."""
    arguments = {k: item[k] for k in ("action", "actions") if item.get(k) is not None}
    call = _tool_call(item.get("call_id"), "computer", arguments)
    seen[call.id] = {
        "id": item.get("id"),
        "pending_safety_checks": item.get("pending_safety_checks") or [],
    }
    return call


_STOP = {
    "end_turn": "stop",
    "stop_sequence": "stop",
    "max_tokens": "length",
    "tool_use": "tool_calls",
    "refusal": "content_filter",
}


def _parse_messages(body: dict[str, Any]) -> Parsed:
    blocks = body.get("content")
    if not isinstance(blocks, list):
        raise _Malformed("no content")
    texts: list[str] = []
    calls: list[ToolCall] = []
    thinking: list[dict[str, Any]] = []
    summary: dict[str, Any] | None = None
    for block in map(_dict, blocks):
        kind = block.get("type")
        if kind == "text" and isinstance(block.get("text"), str):
            texts.append(block["text"])
        elif kind == "tool_use":
            if not isinstance(block.get("input"), dict):
                raise _Malformed("tool call input is not a JSON object")
            calls.append(_tool_call(block.get("id"), block.get("name"), block["input"]))
        elif kind in ("thinking", "redacted_thinking"):
            thinking.append(block)
        elif kind == "compaction" and isinstance(block.get("content"), str):
            summary = block if block["content"].strip() else summary  # empty: failed
    content = "".join(texts) if texts else None
    message = _message(content, calls)
    if summary is not None:
        # Server-side compaction: it goes back verbatim, first in this turn.
        message["compaction"] = summary
    if thinking:
        # Anthropic wants them back verbatim in the next turn when tools are in play.
        message["thinking_blocks"] = thinking
    stop = body.get("stop_reason")
    return Parsed(message, content, calls, _STOP.get(str(stop), stop) if stop else None)


class SSELike(Protocol):
    """A server-sent event: `proctor._http.SSEEvent` or anything shaped like it."""

    @property
    def event(self) -> str | None: ...

    @property
    def data(self) -> str: ...


class StreamAccumulator:
    """Folds one streamed response's SSE events into the body the API would have sent
    unstreamed, so a stream can be recorded, priced and checked like any response.

    Events whose data is not JSON are skipped; `[DONE]` and empty keep-alives are
    expected, any other such event is counted in `problem` (the stream was broken).

    Args:
        api: `chat`, `responses` or `messages`.

    Raises:
        ValueError: unknown `api`.
    """

    def __init__(self, api: str) -> None:
        folds: dict[str, type[_ChatFold | _ResponsesFold | _MessagesFold]] = {
            "chat": _ChatFold,
            "responses": _ResponsesFold,
            "messages": _MessagesFold,
        }
        if api not in folds:
            raise ValueError(f"unknown api {api!r}")
        self.api = api
        self._fold: _ChatFold | _ResponsesFold | _MessagesFold = folds[api]()
        self.events = 0
        self.broken = 0
        self._first_broken = ""

    def feed(self, event: SSELike) -> None:
        """Fold in one event."""
        try:
            data = orjson.loads(event.data)
        except orjson.JSONDecodeError:
            text = event.data.strip()
            if text and text != "[DONE]":
                self.broken += 1
                self._first_broken = self._first_broken or text
            return
        if isinstance(data, dict):
            self.events += 1
            self._fold.feed(data)

    @property
    def problem(self) -> str | None:
        """None, or why the stream is not a usable answer whatever it folds to: some
        events' data was not JSON (cut or garbled), so `result()` misses their part."""
        if not self.broken:
            return None
        what = "event is" if self.broken == 1 else "events are"
        return f"{self.broken} stream {what} not JSON (first: {brief(self._first_broken, 80)})"

    def result(self) -> dict[str, Any]:
        """The body so far (complete once the stream ended)."""
        return self._fold.result()


def _append(target: dict[str, Any], key: str, piece: Any) -> None:
    if isinstance(piece, str):
        target[key] = (target.get(key) or "") + piece


class _ChatFold:
    def __init__(self) -> None:
        self.body: dict[str, Any] = {}
        self.choices: dict[int, dict[str, Any]] = {}
        self.calls: dict[int, dict[int, dict[str, Any]]] = {}

    def feed(self, data: dict[str, Any]) -> None:
        for key, value in data.items():
            if key not in ("choices", "object") and value is not None:
                self.body[key] = value
        for raw in data.get("choices") or []:
            self._choice(_dict(raw))

    def _choice(self, raw: dict[str, Any]) -> None:
        index = _int(raw.get("index"))
        choice = self.choices.setdefault(
            index, {"index": index, "message": {"role": "assistant", "content": None}}
        )
        delta = _dict(raw.get("delta"))
        message = choice["message"]
        for key in ("content", "reasoning_content", "reasoning", "refusal"):
            _append(message, key, delta.get(key))
        calls = self.calls.setdefault(index, {})
        for position, piece in enumerate(delta.get("tool_calls") or []):
            piece = _dict(piece)
            call = calls.setdefault(
                _int(piece.get("index", position)),
                {"id": "", "type": "function", "function": {"name": "", "arguments": ""}},
            )
            if piece.get("id"):
                call["id"] = piece["id"]
            fn = _dict(piece.get("function"))
            _append(call["function"], "name", fn.get("name"))
            _append(call["function"], "arguments", fn.get("arguments"))
        if raw.get("finish_reason"):
            choice["finish_reason"] = raw["finish_reason"]
        logprobs = _dict(raw.get("logprobs"))
        for key in ("content", "refusal"):
            if isinstance(logprobs.get(key), list):
                choice.setdefault("logprobs", {}).setdefault(key, []).extend(logprobs[key])
        if isinstance(raw.get("token_ids"), list):
            choice.setdefault("token_ids", []).extend(raw["token_ids"])

    def result(self) -> dict[str, Any]:
        choices = []
        for index in sorted(self.choices):
            choice = {**self.choices[index], "message": dict(self.choices[index]["message"])}
            choice.setdefault("finish_reason", None)
            if self.calls.get(index):
                calls = self.calls[index]
                choice["message"]["tool_calls"] = [calls[k] for k in sorted(calls)]
            choices.append(choice)
        return {**self.body, "object": "chat.completion", "choices": choices}


class _ResponsesFold:
    def __init__(self) -> None:
        self.body: dict[str, Any] = {}
        self.items: dict[int, dict[str, Any]] = {}

    def feed(self, data: dict[str, Any]) -> None:
        kind = data.get("type")
        index = _int(data.get("output_index"))
        if isinstance(data.get("response"), dict):
            self.body = dict(data["response"])
        elif kind == "error":
            self.body["error"] = {k: v for k, v in data.items() if k != "type"}
        elif kind in ("response.output_item.added", "response.output_item.done"):
            self.items[index] = dict(_dict(data.get("item")))
        elif kind == "response.content_part.added" and index in self.items:
            parts = self.items[index].setdefault("content", [])
            parts.append(dict(_dict(data.get("part"))))
        elif kind == "response.output_text.delta":
            parts = self.items.get(index, {}).get("content") or []
            part = _int(data.get("content_index"))
            if part < len(parts):
                _append(parts[part], "text", data.get("delta"))
        elif kind == "response.function_call_arguments.delta" and index in self.items:
            _append(self.items[index], "arguments", data.get("delta"))

    def result(self) -> dict[str, Any]:
        body = dict(self.body)
        if not body.get("output") and self.items:
            body["output"] = [self.items[k] for k in sorted(self.items)]
        return body


class _MessagesFold:
    def __init__(self) -> None:
        self.body: dict[str, Any] = {}
        self.usage: dict[str, Any] = {}
        self.blocks: dict[int, dict[str, Any]] = {}
        self.partial: dict[int, str] = {}

    def feed(self, data: dict[str, Any]) -> None:
        kind = data.get("type")
        index = _int(data.get("index"))
        if kind == "message_start":
            self.body = dict(_dict(data.get("message")))
            self.usage = dict(_dict(self.body.get("usage")))
        elif kind == "content_block_start":
            self.blocks[index] = dict(_dict(data.get("content_block")))
            if self.blocks[index].get("type") in ("tool_use", "server_tool_use"):
                self.partial[index] = ""
        elif kind == "content_block_delta" and index in self.blocks:
            self._delta(self.blocks[index], index, _dict(data.get("delta")))
        elif kind == "content_block_stop":
            self._finish(index)
        elif kind == "message_delta":
            self.body.update({k: v for k, v in _dict(data.get("delta")).items()})
            self.usage.update({k: v for k, v in _dict(data.get("usage")).items() if v is not None})
        elif kind == "error":
            self.body["error"] = data.get("error")

    def _delta(self, block: dict[str, Any], index: int, delta: dict[str, Any]) -> None:
        kind = delta.get("type")
        if kind == "text_delta":
            _append(block, "text", delta.get("text"))
        elif kind == "input_json_delta" and index in self.partial:
            self.partial[index] += str(delta.get("partial_json") or "")
        elif kind == "thinking_delta":
            _append(block, "thinking", delta.get("thinking"))
        elif kind == "signature_delta":
            _append(block, "signature", delta.get("signature"))
        elif kind == "citations_delta":
            block.setdefault("citations", []).append(delta.get("citation"))
        elif kind == "compaction_delta":  # the whole summary in one delta
            _append(block, "content", delta.get("content"))

    def _finish(self, index: int) -> None:
        text = self.partial.pop(index, None)
        if text is not None and index in self.blocks:
            self.blocks[index]["input"] = _tool_input(text)

    def result(self) -> dict[str, Any]:
        blocks = {k: dict(v) for k, v in self.blocks.items()}
        for index, text in self.partial.items():  # a stream cut inside a tool call
            if index in blocks:
                blocks[index]["input"] = _tool_input(text)
        body = dict(self.body)
        if blocks or "content" in body:
            body["content"] = [blocks[k] for k in sorted(blocks)]
        if self.usage:
            body["usage"] = dict(self.usage)
        return body


def _tool_input(text: str) -> Any:
    """Streamed tool input; kept as text when it is not JSON, so check_response flags it."""
    try:
        return orjson.loads(text) if text.strip() else {}
    except orjson.JSONDecodeError:
        return text
