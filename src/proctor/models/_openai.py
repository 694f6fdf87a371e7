"""OpenAI adapters (Chat Completions and Responses) on the official `openai` SDK.

Any OpenAI-compatible server (vLLM, SGLang, Ollama, OpenRouter, ...) goes through
`ChatAdapter` with its base URL.

Images: Chat Completions takes `image_url` parts on user messages only (a tool
message's content is text parts), so a tool result's images go in one user message
right after the tool messages of that turn, each introduced by its call id; the tool
message keeps the text and says the image follows. Responses takes `input_image`
parts in a user message and in a `function_call_output`'s `output` list.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import openai
import orjson

from ._client import Reply, SdkAdapter, call_sdk, thinking_within
from ._content import data_url, is_image
from ._types import Message, ToolSpec
from ._wire import text_of

__all__ = ["ChatAdapter", "ResponsesAdapter"]

_OPENAI = ("openai", "openai-responses")
"""Providers that take `prompt_cache_key`; others get the key as `X-Session-Id`."""

_AFFINITY = ("x-session-affinity", "x-multi-turn-session-id")
"""Fireworks' routing headers: the rollout's turns go to one replica (its KV cache)."""

_OWN_REASONING = ("openai", "openai-responses")
"""Providers that refuse `reasoning_content` on an input message."""


class _OpenAIAdapter(SdkAdapter):
    def sdk_client(self, **options: Any) -> openai.AsyncOpenAI:
        """The OpenAI client on the model's base URL."""
        return openai.AsyncOpenAI(base_url=self.spec.base_url, **options)

    def session_headers(self, session_key: str | None) -> dict[str, str]:
        """Compatible servers get the session key as a header (routing affinity)."""
        if session_key is None or self.spec.provider in _OPENAI:
            return {}
        if self.spec.provider == "fireworks":
            return dict.fromkeys(_AFFINITY, session_key)
        return {"X-Session-Id": session_key}

    def session_params(self, session_key: str) -> dict[str, Any]:
        """OpenAI's own APIs take the session key as `prompt_cache_key`."""
        return {"prompt_cache_key": session_key} if self.spec.provider in _OPENAI else {}


class ChatAdapter(_OpenAIAdapter):
    """OpenAI Chat Completions, and every server that speaks it."""

    api = "chat"

    def body(
        self, messages: list[Message], tools: Sequence[ToolSpec], params: dict[str, Any]
    ) -> dict[str, Any]:
        """`POST /chat/completions` body."""
        if self.spec.provider == "fireworks" and "/routers/" in self.spec.model:
            params.pop("service_tier", None)  # a router id refuses one
        ceiling = params.get("max_completion_tokens") or params.get("max_tokens")
        thinking_within(params, ceiling if isinstance(ceiling, int) else None)
        keep = self.spec.provider not in _OWN_REASONING
        body: dict[str, Any] = {
            "model": self.spec.model,
            "messages": chat_messages(messages, reasoning=keep),
        }
        if tools:
            body["tools"] = [
                {
                    "type": "function",
                    "function": {
                        "name": t.name,
                        "description": t.description,
                        "parameters": t.parameters,
                        **({"strict": True} if t.strict else {}),
                    },
                }
                for t in tools
            ]
        return {**body, **params}

    async def send(self, body: dict[str, Any], headers: dict[str, str]) -> Reply:
        """One `chat.completions.create` through the SDK."""
        create = self._sdk.chat.completions.with_raw_response.create
        return await call_sdk(openai, create, body, headers, ("model", "messages"))


def chat_messages(messages: list[Message], *, reasoning: bool = True) -> list[Message]:
    """The history as Chat Completions messages, images encoded (fresh dicts).

    An assistant message's `reasoning_content` goes back with its tool calls (reasoning
    models on Fireworks, DeepSeek, vLLM continue from it) unless `reasoning` is False.
    """
    drop = ("thinking_blocks", "compaction") + (() if reasoning else ("reasoning_content",))
    out: list[Message] = []
    pending: list[dict[str, Any]] = []  # tool results' images, for the user message after
    for m in messages:
        if m.get("role") != "tool" and pending:
            out.append({"role": "user", "content": pending})
            pending = []
        # Anthropic thinking and compaction blocks ride along in chat-shaped history;
        # OpenAI refuses them.
        message = {k: v for k, v in m.items() if k not in drop}
        content = m.get("content")
        if isinstance(content, list) and any(is_image(p) for p in content):
            if m.get("role") == "tool":
                message["content"] = _tool_text(content, m.get("tool_call_id"))
                pending.append(
                    {"type": "text", "text": f"Image from tool call {m.get('tool_call_id')}:"}
                )
                pending += [_image_url(p) for p in content if is_image(p)]
            else:
                message["content"] = [_image_url(p) if is_image(p) else p for p in content]
        out.append(message)
    if pending:
        out.append({"role": "user", "content": pending})
    return out


def _tool_text(content: list[Any], call_id: Any) -> list[dict[str, Any]]:
    parts = [{"type": "text", "text": str(p.get("text", ""))} for p in content if not is_image(p)]
    note = f"[image: in the next user message, after 'Image from tool call {call_id}:']"
    return [*parts, {"type": "text", "text": note}]


def _image_url(part: dict[str, Any]) -> dict[str, Any]:
    image = part.get("image_url")
    url: dict[str, Any] = {"url": data_url(part)}
    if isinstance(image, dict) and image.get("detail"):
        url["detail"] = image["detail"]
    return {"type": "image_url", "image_url": url}


class ResponsesAdapter(_OpenAIAdapter):
    """The OpenAI Responses API, fed the chat-shaped history turned into input items."""

    api = "responses"

    def body(
        self, messages: list[Message], tools: Sequence[ToolSpec], params: dict[str, Any]
    ) -> dict[str, Any]:
        """`POST /responses` body."""
        if "max_tokens" in params:
            params.setdefault("max_output_tokens", params.pop("max_tokens"))
        body: dict[str, Any] = {"model": self.spec.model, "input": self.input_items(messages)}
        if tools:
            body["tools"] = [
                dict(t.native)
                if t.native is not None
                else {
                    "type": "function",
                    "name": t.name,
                    "description": t.description,
                    "parameters": t.parameters,
                    "strict": t.strict,
                }
                for t in tools
            ]
        return {**body, **params}

    def input_items(self, messages: list[Message]) -> list[dict[str, Any]]:
        """The history as the `input` list (see `responses_input`)."""
        return responses_input(messages)

    async def send(self, body: dict[str, Any], headers: dict[str, str]) -> Reply:
        """One `responses.create` through the SDK."""
        create = self._sdk.responses.with_raw_response.create
        return await call_sdk(openai, create, body, headers, ("model", "input"))


def responses_input(messages: list[Message]) -> list[dict[str, Any]]:
    """Chat messages as Responses input items.

    A call that came as a `computer_call` goes back as one, and its tool result as a
    `computer_call_output` with the result's last image as the screenshot (its safety
    checks acknowledged); the result's text follows as a user message. A computer call
    whose result lost its image to compaction goes as text (call and result), since a
    `computer_call_output` must carry a screenshot.
    """
    items: list[dict[str, Any]] = []
    computer: dict[str, dict[str, Any]] = {}
    shots = {
        m.get("tool_call_id")
        for m in messages
        if m.get("role") == "tool"
        and isinstance(m.get("content"), list)
        and any(is_image(p) for p in m["content"])
    }
    textual = _computer_ids(messages) - shots
    for m in messages:
        role = m.get("role")
        if role == "tool" and m.get("tool_call_id") in computer:
            items += _computer_output(m, computer[m["tool_call_id"]])
            continue
        if role == "tool" and m.get("tool_call_id") in textual:
            text = f"[result of computer call {m.get('tool_call_id')}] {text_of(m.get('content'))}"
            items.append({"role": "user", "content": [{"type": "input_text", "text": text}]})
            continue
        if role == "tool":
            content = m.get("content")
            output: Any = text_of(content)
            if isinstance(content, list) and any(is_image(p) for p in content):
                output = _input_parts(content)
            items.append(
                {"type": "function_call_output", "call_id": m.get("tool_call_id"), "output": output}
            )
            continue
        content = m.get("content")
        if role == "assistant":
            if content:
                items.append({"role": "assistant", "content": text_of(content)})
            for call in m.get("tool_calls") or []:
                fn = call.get("function") or {}
                if call.get("type") == "computer_call" and call.get("id") in shots:
                    computer[call.get("id")] = call.get("computer_call") or {}
                    items.append(_computer_item(call, fn))
                    continue
                if call.get("type") == "computer_call":
                    text = f"[computer call {call.get('id')}] {fn.get('arguments')}"
                    items.append({"role": "assistant", "content": text})
                    continue
                items.append(
                    {
                        "type": "function_call",
                        "call_id": call.get("id"),
                        "name": fn.get("name"),
                        "arguments": fn.get("arguments") or "{}",
                    }
                )
            continue
        items.append({"role": role, "content": _input_parts(content)})
    return items


def _computer_ids(messages: list[Message]) -> set[Any]:
    return {
        call.get("id")
        for m in messages
        if m.get("role") == "assistant"
        for call in m.get("tool_calls") or ()
        if call.get("type") == "computer_call"
    }


def _computer_item(call: dict[str, Any], fn: dict[str, Any]) -> dict[str, Any]:
    meta = call.get("computer_call") or {}
    item: dict[str, Any] = {
        "type": "computer_call",
        "call_id": call.get("id"),
        "pending_safety_checks": meta.get("pending_safety_checks") or [],
        "status": "completed",
        **orjson.loads(fn.get("arguments") or "{}"),
    }
    if meta.get("id"):
        item["id"] = meta["id"]
    return item


def _computer_output(message: Message, meta: dict[str, Any]) -> list[dict[str, Any]]:
    content = message.get("content")
    parts = content if isinstance(content, list) else [{"type": "text", "text": content or ""}]
    images = [p for p in parts if is_image(p)]  # at least one: see responses_input
    items: list[dict[str, Any]] = [
        {
            "type": "computer_call_output",
            "call_id": message.get("tool_call_id"),
            "output": {"type": "computer_screenshot", "image_url": data_url(images[-1])},
            "acknowledged_safety_checks": meta.get("pending_safety_checks") or [],
        }
    ]
    text = text_of([p for p in parts if not is_image(p)])
    if text:
        items.append({"role": "user", "content": [{"type": "input_text", "text": text}]})
    return items


def _input_parts(content: Any) -> Any:
    if not isinstance(content, list):
        return "" if content is None else content
    parts = []
    for part in content:
        kind = part.get("type") if isinstance(part, dict) else None
        if kind == "text":
            parts.append({"type": "input_text", "text": part.get("text", "")})
        elif is_image(part):
            image = part.get("image_url")
            item = {"type": "input_image", "image_url": data_url(part)}
            if isinstance(image, dict) and image.get("detail"):
                item["detail"] = image["detail"]
            parts.append(item)
        else:
            parts.append(part)
    return parts
