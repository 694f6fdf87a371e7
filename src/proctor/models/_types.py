"""The values a model call takes and returns: tools, tool calls, usage, attempts, responses."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol, runtime_checkable

__all__ = ["Attempt", "ModelClient", "ModelResponse", "ToolCall", "ToolSpec", "Usage"]

Message = dict[str, Any]
"""One message in OpenAI Chat Completions shape (role, content, tool_calls, tool_call_id)."""


def _empty_object_schema() -> dict[str, Any]:
    return {"type": "object", "properties": {}}


@dataclass(frozen=True, slots=True)
class ToolSpec:
    """A function the model may call; `parameters` is a JSON schema for its arguments.

    `strict` asks OpenAI's APIs to hold the model to the schema (structured outputs:
    `additionalProperties: false` and every property required at every level); other
    APIs ignore it, so the caller still validates the arguments. `native` is an
    Anthropic server-defined tool (e.g. `computer_20250124`) the Messages adapter sends
    as it is instead of a function; its calls come back as tool calls named `name`.
    """

    name: str
    description: str = ""
    parameters: dict[str, Any] = field(default_factory=_empty_object_schema)
    strict: bool = False
    native: dict[str, Any] | None = None


@dataclass(slots=True)
class ToolCall:
    """One tool call the model made; `raw_arguments` is the JSON text as the model wrote it."""

    id: str
    name: str
    arguments: dict[str, Any]
    raw_arguments: str = ""


@dataclass(slots=True)
class Usage:
    """Tokens of one or more responses.

    `cached_input_tokens` and `cache_write_tokens` are subsets of `input_tokens`;
    `reasoning_tokens` is a subset of `output_tokens`.
    """

    input_tokens: int = 0
    cached_input_tokens: int = 0
    cache_write_tokens: int = 0
    output_tokens: int = 0
    reasoning_tokens: int = 0

    @property
    def total_tokens(self) -> int:
        """Input plus output tokens."""
        return self.input_tokens + self.output_tokens

    def __add__(self, other: Usage) -> Usage:
        return Usage(
            self.input_tokens + other.input_tokens,
            self.cached_input_tokens + other.cached_input_tokens,
            self.cache_write_tokens + other.cache_write_tokens,
            self.output_tokens + other.output_tokens,
            self.reasoning_tokens + other.reasoning_tokens,
        )

    def to_dict(self) -> dict[str, int]:
        """The counters plus `total_tokens`, as plain JSON (by hand: it runs on every
        turn through the proxy, and a field loop costs a getattr per field)."""
        return {
            "input_tokens": self.input_tokens,
            "cached_input_tokens": self.cached_input_tokens,
            "cache_write_tokens": self.cache_write_tokens,
            "output_tokens": self.output_tokens,
            "reasoning_tokens": self.reasoning_tokens,
            "total_tokens": self.total_tokens,
        }


@dataclass(slots=True)
class Attempt:
    """One HTTP try of a model call, as it lands in the trace.

    `cause` is one of `ok`, `throttled` (429 or provider throttling), `server` (5xx),
    `transport` (408, 409, connect/read errors, timeouts), `malformed` (a response that
    is not usable), `oversize` (413) or `refused` (any other 4xx). `wait` is the time
    slept after this attempt before the next one.
    """

    n: int
    cause: str
    status: int | None
    error: str | None
    wait: float
    started: float
    duration: float

    def to_dict(self) -> dict[str, Any]:
        """The fields as plain JSON (by hand, as `Usage.to_dict`: every turn has one)."""
        return {
            "n": self.n,
            "cause": self.cause,
            "status": self.status,
            "error": self.error,
            "wait": self.wait,
            "started": self.started,
            "duration": self.duration,
        }


@dataclass(slots=True)
class ModelResponse:
    """A model's answer: the assistant message in chat shape, plus accounting.

    Attributes:
        message: the assistant message (`role`, `content`, `tool_calls`), ready to
            append to the history.
        content: the message's text, or None.
        tool_calls: the parsed tool calls.
        usage: tokens of this response.
        cost: USD from the shipped pricing table, or None for an unknown model.
        model: the model string the client was made from.
        finish_reason: `stop`, `tool_calls`, `length`, ... (chat vocabulary).
        attempts: every HTTP try, the successful one last.
        latency: seconds from the first try to the answer, waits included.
        raw: the provider's JSON body.
    """

    message: dict[str, Any]
    content: str | None
    tool_calls: list[ToolCall]
    usage: Usage
    cost: float | None
    model: str
    finish_reason: str | None
    attempts: list[Attempt] = field(default_factory=list)
    latency: float = 0.0
    raw: Any = None

    def to_dict(self) -> dict[str, Any]:
        """Everything but `raw` and the parsed tool calls (they are in `message`)."""
        return {
            "message": self.message,
            "usage": self.usage.to_dict(),
            "cost": self.cost,
            "model": self.model,
            "finish_reason": self.finish_reason,
            "attempts": [a.to_dict() for a in self.attempts],
            "latency": self.latency,
        }


@runtime_checkable
class ModelClient(Protocol):
    """One contract for model calls, whatever the provider.

    Messages are chat-shaped dicts; adapters convert them to their API.
    """

    model: str

    async def complete(
        self,
        messages: list[Message],
        *,
        tools: Sequence[ToolSpec] = (),
        require_tool_call: bool = False,
        session_key: str | None = None,
        **params: Any,
    ) -> ModelResponse:
        """Send `messages` and return the assistant's answer.

        Args:
            messages: the history in chat shape.
            tools: functions the model may call. A call to any other name is returned
                as it is, for the caller to answer (it is not a malformed response).
            require_tool_call: a response without a tool call is malformed (retried).
                This only validates; pass `tool_choice` to make the model call one.
            session_key: a rollout-stable key for prompt caching and routing affinity.
            **params: provider parameters passed through (`temperature`, `max_tokens`, ...).

        Raises:
            ModelRequestError: the provider refused the request.
            RetriesExhausted: too many consecutive transport errors or malformed answers.
            PayloadTooLarge: 413 and no smaller rewrite of the request was left.
        """
        ...

    async def aclose(self) -> None:
        """Release the HTTP connections."""
        ...
