"""OpenRouter's Responses API (beta): stateless, so every turn sends the whole history.

The input is rebuilt from the chat-shaped history on every turn and only ever grows:
the first user message as it was, each `function_call` followed by its
`function_call_output`, each assistant message (with an id from its position), the next
user message. Nothing earlier is re-encoded differently, so each request's input is
the previous one's plus the new turn, which keeps the provider's prompt cache warm.
No client compaction runs unless a context policy or a request ceiling is given (a
413 still compacts: the turn cannot be sent otherwise).

The rollout's session key goes as `session_id` (OpenRouter's sticky-routing key) and
`prompt_cache_key`; Anthropic routes get OpenRouter's automatic caching (a top-level
`cache_control`), which moves the breakpoint forward as the history grows.
"""

from __future__ import annotations

from typing import Any

from ._openai import ResponsesAdapter, responses_input
from ._types import Message

__all__ = ["OpenRouterResponsesAdapter", "openrouter_input"]

_AUTOMATIC = {"type": "ephemeral"}


class OpenRouterResponsesAdapter(ResponsesAdapter):
    """`openrouter/...?api=responses` (or `openrouter-responses/...`): see the module."""

    def __init__(self, *args: Any, cache_prompt: bool = True, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.cache_prompt = cache_prompt

    def body(self, messages: list[Message], tools: Any, params: dict[str, Any]) -> dict[str, Any]:
        """`POST /responses` body, with automatic caching on Anthropic routes."""
        body = super().body(messages, tools, params)
        if self.cache_prompt and self.spec.model.startswith("anthropic/"):
            body.setdefault("cache_control", dict(_AUTOMATIC))
        return body

    def session_headers(self, session_key: str | None) -> dict[str, str]:
        """None: the body carries the session (it wins over OpenRouter's header anyway)."""
        return {}

    def session_params(self, session_key: str) -> dict[str, Any]:
        """The session key as `session_id` (sticky routing) and `prompt_cache_key`."""
        return {"session_id": session_key, "prompt_cache_key": session_key}

    def input_items(self, messages: list[Message]) -> list[dict[str, Any]]:
        """See `openrouter_input`."""
        return openrouter_input(messages)


def openrouter_input(messages: list[Message]) -> list[dict[str, Any]]:
    """Chat messages as OpenRouter Responses input items, append-only turn over turn.

    Assistant text is an output `message` item with a positional id; a tool result's
    output is text, its images following in one user message after that turn's
    outputs (as Chat Completions takes them), so no earlier item changes shape.
    """
    items: list[dict[str, Any]] = []
    pending: list[dict[str, Any]] = []
    assistant = 0
    for item in responses_input(messages):
        if item.get("type") != "function_call_output" and pending:
            items.append({"role": "user", "content": pending})
            pending = []
        if item.get("role") == "assistant":
            items.append(
                {
                    "type": "message",
                    "role": "assistant",
                    "id": f"msg_{assistant}",
                    "status": "completed",
                    "content": [
                        {"type": "output_text", "text": str(item["content"]), "annotations": []}
                    ],
                }
            )
            assistant += 1
            continue
        output = item.get("output")
        if item.get("type") == "function_call_output" and isinstance(output, list):
            images = [p for p in output if p.get("type") == "input_image"]
            text = "\n".join(
                str(p.get("text", "")) for p in output if p.get("type") == "input_text"
            )
            intro = f"Image from tool call {item['call_id']}:"
            note = f"[image: in the next user message, after '{intro}']"
            item = {**item, "output": f"{text}\n{note}" if text else note}
            pending += [{"type": "input_text", "text": intro}, *images]
        items.append(item)
    if pending:
        items.append({"role": "user", "content": pending})
    return items
