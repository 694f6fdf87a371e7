"""The Anthropic Messages adapter on the official `anthropic` SDK.

Chat-shaped history becomes a `system` plus alternating user/assistant turns; tool
results become `tool_result` blocks (with `image` blocks for a result's images, as on
user turns); cache breakpoints mark the stable prefix.

Server-side compaction (`server_compaction=`, for models that support it) sends the
`compact_20260112` context-management edit with its beta header; the `compaction`
block an answer starts with rides on the chat-shaped message and goes back verbatim,
first in that assistant turn, so the API continues from the summary. A request the
API refuses for the edit is sent again without it, and compaction stays off for the
client: a failed compaction is a no-op. Without `server_compaction` no request carries
the edit or the header (the deterministic client compaction applies, if configured).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import anthropic

from ._client import Reply, SdkAdapter, call_sdk, thinking_within
from ._content import image_data, is_image
from ._turns import alternating_turns
from ._types import Message, ToolSpec
from ._wire import arguments_object, text_of

__all__ = ["MessagesAdapter", "anthropic_messages"]

DEFAULT_MAX_TOKENS = 8192
"""Anthropic requires `max_tokens`; this is sent when the caller gives none."""

COMPACTION_BETA = "compact-2026-01-12"
COMPACTION_EDIT = "compact_20260112"
DEFAULT_COMPACTION_TRIGGER = 150_000
"""The API's documented default trigger for compaction, in input tokens."""
MIN_COMPACTION_TRIGGER = 50_000
"""The smallest trigger the API takes."""

MIN_THINKING = 1024
"""The smallest `thinking.budget_tokens` the Messages API takes."""

_BREAKPOINT = {"type": "ephemeral"}

_NAMED = ("model", "messages", "max_tokens")
"""The body's keys `messages.create` takes as arguments (the rest go as `extra_body`)."""


class MessagesAdapter(SdkAdapter):
    """Anthropic Messages (and servers that speak it)."""

    api = "messages"

    def __init__(
        self,
        *args: Any,
        cache_prompt: bool = True,
        server_compaction: int | None = None,
        **kwargs: Any,
    ) -> None:
        if server_compaction is not None and server_compaction < MIN_COMPACTION_TRIGGER:
            raise ValueError(
                f"server_compaction triggers at {MIN_COMPACTION_TRIGGER} input tokens or "
                f"more, not {server_compaction}"
            )
        super().__init__(*args, **kwargs)
        self.cache_prompt = cache_prompt
        self.server_compaction = server_compaction

    def sdk_client(self, **options: Any) -> anthropic.AsyncAnthropic:
        """The Anthropic client (the SDK adds /v1/messages to the base URL itself)."""
        return anthropic.AsyncAnthropic(base_url=self.spec.base_url.removesuffix("/v1"), **options)

    def body(
        self, messages: list[Message], tools: Sequence[ToolSpec], params: dict[str, Any]
    ) -> dict[str, Any]:
        """`POST /v1/messages` body."""
        system, turns = anthropic_messages(messages)
        body: dict[str, Any] = {
            "model": self.spec.model,
            "max_tokens": params.pop("max_tokens", None)
            or params.pop("max_completion_tokens", None)
            or DEFAULT_MAX_TOKENS,
            "messages": turns,
        }
        thinking_within(params, body["max_tokens"], MIN_THINKING)
        if system:
            body["system"] = system
        if tools:
            body["tools"] = [_tool(t) for t in tools]
        if self.cache_prompt:
            add_breakpoints(body)
        if self.server_compaction is not None:
            trigger = {"type": "input_tokens", "value": self.server_compaction}
            body["context_management"] = {"edits": [{"type": COMPACTION_EDIT, "trigger": trigger}]}
        return {**body, **params}

    def session_params(self, session_key: str) -> dict[str, Any]:
        """The session key as `metadata.user_id`."""
        return {"metadata": {"user_id": session_key}}

    async def send(self, body: dict[str, Any], headers: dict[str, str]) -> Reply:
        """One `messages.create` through the SDK (again without the compaction edit
        when the API refuses it; compaction is then off for this client)."""
        plain = {k: v for k, v in body.items() if k != "context_management"}
        if self.server_compaction is None or len(plain) == len(body):
            return await self._create(plain, headers)
        reply = await self._create(body, {**headers, "anthropic-beta": COMPACTION_BETA})
        if reply.status == 400 and _refuses_compaction(reply.content):
            self.server_compaction = None
            return await self._create(plain, headers)
        return reply

    async def _create(self, body: dict[str, Any], headers: dict[str, str]) -> Reply:
        create = self._sdk.messages.with_raw_response.create
        return await call_sdk(anthropic, create, body, headers, _NAMED)


def _refuses_compaction(content: bytes) -> bool:
    """Whether a 400's body blames the compaction edit (unsupported model, beta...)."""
    text = content.decode(errors="replace").lower()
    return "compact" in text or "context_management" in text


def _tool(tool: ToolSpec) -> dict[str, Any]:
    if tool.native is not None:
        return dict(tool.native)
    spec: dict[str, Any] = {"name": tool.name, "input_schema": tool.parameters}
    if tool.description:
        spec["description"] = tool.description
    return spec


def add_breakpoints(body: dict[str, Any]) -> None:
    """Mark the stable prefix for Anthropic's prompt cache (at most 4 breakpoints).

    The last tool and the last system block cache the fixed preamble; the last two
    user turns cache the history, so each call reads what the previous one wrote.
    """
    if body.get("tools"):
        body["tools"][-1]["cache_control"] = _BREAKPOINT
    if body.get("system"):
        body["system"][-1]["cache_control"] = _BREAKPOINT
    users = [m for m in body["messages"] if m["role"] == "user" and m["content"]]
    for turn in users[-2:]:
        turn["content"][-1]["cache_control"] = _BREAKPOINT


def anthropic_messages(messages: list[Message]) -> tuple[list[dict[str, Any]], list[Message]]:
    """Chat messages as Anthropic `system` blocks and alternating turns (fresh dicts)."""
    return alternating_turns(
        messages,
        system=lambda text: {"type": "text", "text": text},
        assistant=_assistant_blocks,
        tool=_tool_result,
        user=_user_blocks,
        empty_turns=True,
    )


def _assistant_blocks(message: Message) -> list[dict[str, Any]]:
    compaction = message.get("compaction")
    blocks = [dict(compaction)] if isinstance(compaction, dict) else []
    blocks += [dict(b) for b in message.get("thinking_blocks") or []]
    text = text_of(message.get("content"))
    if text:
        blocks.append({"type": "text", "text": text})
    for call in message.get("tool_calls") or []:
        fn = call.get("function") or {}
        blocks.append(
            {
                "type": "tool_use",
                "id": call.get("id"),
                "name": fn.get("name"),
                "input": arguments_object(fn.get("arguments")),
            }
        )
    return blocks


def _tool_result(message: Message) -> dict[str, Any]:
    block: dict[str, Any] = {"type": "tool_result", "tool_use_id": message.get("tool_call_id")}
    content = message.get("content")
    if isinstance(content, list):
        block["content"] = _user_blocks(content)
    elif content:
        block["content"] = str(content)
    return block


def _user_blocks(content: Any) -> list[dict[str, Any]]:
    if not isinstance(content, list):
        return [{"type": "text", "text": str(content)}] if content else []
    blocks = []
    for part in content:
        kind = part.get("type") if isinstance(part, dict) else None
        if kind == "text":
            blocks.append({"type": "text", "text": part.get("text", "")})
        elif is_image(part):
            blocks.append(_image(part))
        elif isinstance(part, dict):
            blocks.append(dict(part))  # already an Anthropic block
    return blocks


def _image(part: dict[str, Any]) -> dict[str, Any]:
    data = image_data(part)
    if data is not None:
        return {
            "type": "image",
            "source": {"type": "base64", "media_type": data[0], "data": data[1]},
        }
    image = part.get("image_url")
    url = str(image.get("url") if isinstance(image, dict) else image)
    return {"type": "image", "source": {"type": "url", "url": url}}
