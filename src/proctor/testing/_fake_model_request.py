"""A request as the fake model saw it, with its messages in one shape."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Literal

import orjson

from .._http import Headers
from ._fake_model_images import FakeImage, images_of
from ._fake_model_reply import Fault

__all__ = ["Api", "FakeRequest", "json_body"]

Api = Literal["chat", "responses", "messages", "models", "converse"]


def json_body(body: bytes) -> Any:
    """A request body as JSON; None when it is not (the request's check then says so)."""
    try:
        return orjson.loads(body)
    except orjson.JSONDecodeError:
        return None


@dataclass(frozen=True, slots=True)
class FakeRequest:
    """One request the fake model received, in arrival order on `FakeModelServer.requests`.

    Attributes:
        api: "chat", "responses", "messages" (Anthropic), "models" or "converse"
            (Bedrock).
        method: the HTTP method.
        path: the request path, e.g. "/v1/chat/completions".
        headers: the request headers.
        body: the raw request body.
        json: the parsed body (a dict for model calls; None for GET).
        time: when it arrived (`time.time()`).
        fault: the injected fault it met, if any.
    """

    api: Api
    method: str
    path: str
    headers: Headers
    body: bytes
    json: Any
    time: float
    fault: Fault | None = None

    @property
    def model(self) -> str:
        """The requested model name ("" when absent)."""
        return str(self._get("model") or "")

    @property
    def stream(self) -> bool:
        """Whether the client asked for SSE."""
        return bool(self._get("stream"))

    @property
    def tool_names(self) -> list[str]:
        """Names of the tools offered, in order."""
        if self.api == "converse":
            tools = (self._get("toolConfig") or {}).get("tools") or ()
            return [str(t["toolSpec"].get("name", "")) for t in tools if "toolSpec" in t]
        return [_tool_name(tool) for tool in self._get("tools") or ()]

    @property
    def images(self) -> list[FakeImage]:
        """The images the request carried, in order, with where each was (`user` or
        `tool`), its media type and decoded size."""
        return images_of(self.api, self.json)[0]

    @property
    def messages(self) -> list[dict[str, Any]]:
        """The conversation as Chat Completions message dicts, whatever the API.

        Text parts are joined into one string; other parts are dropped. Responses
        `instructions` and Anthropic `system` become a leading system message.
        """
        if self.api == "chat":
            return [{**m, "content": _text(m.get("content"))} for m in self._get("messages") or ()]
        if self.api == "responses":
            return _from_responses(self._get("instructions"), self._get("input"))
        if self.api == "messages":
            return _from_anthropic(self._get("system"), self._get("messages") or ())
        if self.api == "converse":
            return _from_converse(self._get("system"), self._get("messages") or ())
        return []

    @property
    def last_message(self) -> dict[str, Any] | None:
        """`messages[-1]`, without normalizing the whole conversation."""
        if self.api == "chat":
            tail = self._get("messages") or ()
            return {**tail[-1], "content": _text(tail[-1].get("content"))} if tail else None
        if self.api == "responses":
            items = self._get("input")
            last = _from_responses(None, items if isinstance(items, str) else (items or ())[-1:])
        elif self.api == "messages":
            last = _from_anthropic(None, (self._get("messages") or ())[-1:])
        elif self.api == "converse":
            last = _from_converse(None, (self._get("messages") or ())[-1:])
        else:
            return None
        return last[-1] if last else None

    def _get(self, key: str) -> Any:
        return self.json.get(key) if isinstance(self.json, dict) else None


def _tool_name(tool: Any) -> str:
    if not isinstance(tool, dict):
        return ""
    function = tool.get("function")
    return str((function if isinstance(function, dict) else tool).get("name", ""))


def _text(content: Any) -> Any:
    """Join text parts (any API's part shape) into a string; pass strings and None."""
    if not isinstance(content, list):
        return content
    return "".join(str(p.get("text", "")) for p in content if isinstance(p, dict) and "text" in p)


def _from_responses(instructions: Any, items: Any) -> list[dict[str, Any]]:
    out: list[dict[str, Any]] = []
    if instructions:
        out.append({"role": "system", "content": _text(instructions)})
    if isinstance(items, str):
        return [*out, {"role": "user", "content": items}]
    for item in items or ():
        kind = item.get("type", "message")
        if kind == "message":
            out.append({"role": item.get("role", "user"), "content": _text(item.get("content"))})
        elif kind == "function_call":
            call = {
                "id": item.get("call_id"),
                "type": "function",
                "function": {"name": item.get("name"), "arguments": item.get("arguments")},
            }
            _assistant_with_calls(out).append(call)
        elif kind == "function_call_output":
            output = _text(item.get("output"))
            out.append({"role": "tool", "tool_call_id": item.get("call_id"), "content": output})
        elif kind == "computer_call":
            action = {k: item[k] for k in ("action", "actions") if k in item}
            call = {
                "id": item.get("call_id"),
                "type": "computer_call",
                "function": {"name": "computer", "arguments": orjson.dumps(action).decode()},
            }
            _assistant_with_calls(out).append(call)
        elif kind == "computer_call_output":
            shot = item.get("output") or {}
            image = {"type": "image_url", "image_url": {"url": shot.get("image_url")}}
            out.append({"role": "tool", "tool_call_id": item.get("call_id"), "content": [image]})
    return out


def _assistant_with_calls(out: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The tool_calls list of the trailing assistant message, opening one if needed."""
    if not out or out[-1]["role"] != "assistant":
        out.append({"role": "assistant", "content": None})
    calls: list[dict[str, Any]] = out[-1].setdefault("tool_calls", [])
    return calls


def _from_anthropic(system: Any, messages: Any) -> list[dict[str, Any]]:
    out: list[dict[str, Any]] = []
    if system:
        out.append({"role": "system", "content": _text(system)})
    for message in messages:
        content = message.get("content")
        if not isinstance(content, list):
            out.append({"role": message.get("role"), "content": content})
            continue
        for block in content:
            if block.get("type") == "tool_result":
                result = _text(block.get("content"))
                out.append(
                    {"role": "tool", "tool_call_id": block.get("tool_use_id"), "content": result}
                )
        texts = [b for b in content if b.get("type") == "text"]
        calls = [_anthropic_call(b) for b in content if b.get("type") == "tool_use"]
        if texts or calls:
            turn: dict[str, Any] = {
                "role": message.get("role"),
                "content": _text(texts) if texts else None,
            }
            if calls:
                turn["tool_calls"] = calls
            out.append(turn)
    return out


def _anthropic_call(block: dict[str, Any]) -> dict[str, Any]:
    arguments = orjson.dumps(block.get("input", {})).decode()
    return {
        "id": block.get("id"),
        "type": "function",
        "function": {"name": block.get("name"), "arguments": arguments},
    }


def _from_converse(system: Any, messages: Any) -> list[dict[str, Any]]:
    """Bedrock Converse blocks in Anthropic's shape, read as Anthropic's."""
    blocks = []
    for message in messages:
        content = []
        for block in message.get("content") or ():
            if "text" in block:
                content.append({"type": "text", "text": block["text"]})
            elif "toolUse" in block:
                use = block["toolUse"]
                content.append(
                    {
                        "type": "tool_use",
                        "id": use.get("toolUseId"),
                        "name": use.get("name"),
                        "input": use.get("input", {}),
                    }
                )
            elif "toolResult" in block:
                result = block["toolResult"]
                texts = [
                    {"type": "text", "text": b["text"]}
                    for b in result.get("content") or ()
                    if "text" in b
                ]
                content.append(
                    {
                        "type": "tool_result",
                        "tool_use_id": result.get("toolUseId"),
                        "content": texts,
                    }
                )
        blocks.append({"role": message.get("role"), "content": content})
    return _from_anthropic(_text(system) if system else None, blocks)
