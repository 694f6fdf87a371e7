"""What the fake model answers: scripted replies and injected faults."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal

__all__ = ["FakeToolCall", "Fault", "Reply"]


@dataclass(frozen=True, slots=True)
class FakeToolCall:
    """One tool call in a scripted reply.

    `arguments` as a mapping is sent as its JSON; as a string it is sent verbatim, so a
    test can script broken JSON. `id` defaults to a fresh provider-shaped id. `native`
    makes it a call of the provider's computer tool: on Responses a `computer_call` item
    whose fields are `arguments` (`action` or `actions`); on Messages a `tool_use` as
    any other (name it `computer`).
    """

    name: str
    arguments: Mapping[str, Any] | str = field(default_factory=dict)
    id: str | None = None
    native: bool = False


@dataclass(frozen=True, slots=True)
class Reply:
    """One scripted model turn, rendered in whichever wire format the request spoke.

    Token counts left as None are computed: input from the request's bytes (about four
    bytes a token), output from the reply's own tokens plus `reasoning_tokens`.
    `cached_tokens` and `cache_write_tokens` are subsets of the input, `reasoning_tokens`
    a subset of the output, as the providers count them.

    Attributes:
        text: the assistant's text, or None for a tool-calls-only turn.
        tool_calls: the calls the model makes this turn.
        finish_reason: in Chat Completions terms ("stop", "length", "tool_calls",
            "content_filter"); mapped to Responses and Anthropic terms. None: "tool_calls"
            when there are calls, else "stop".
        chunks: text (and argument) deltas per part when streaming; None: one per token.
        delay: seconds before the response starts.
        chunk_delay: seconds between streamed events.
        model: the model name answered; None echoes the request's.
        reasoning: a reasoning model's thoughts, as Chat Completions'
            `reasoning_content` (Fireworks, DeepSeek, vLLM); other APIs leave it out.
        compaction: the summary of Anthropic's server-side compaction: a `compaction`
            block first in a Messages answer (unstreamed) to a request that enabled
            the edit; "" plays a failed compaction (an empty block).
    """

    text: str | None = None
    tool_calls: Sequence[FakeToolCall] = ()
    input_tokens: int | None = None
    output_tokens: int | None = None
    cached_tokens: int = 0
    cache_write_tokens: int = 0
    reasoning_tokens: int = 0
    finish_reason: str | None = None
    chunks: int | None = None
    delay: float = 0.0
    chunk_delay: float = 0.0
    model: str | None = None
    reasoning: str | None = None
    compaction: str | None = None

    def __post_init__(self) -> None:
        object.__setattr__(self, "tool_calls", tuple(self.tool_calls))
        if self.chunks is not None and self.chunks < 1:
            raise ValueError(f"chunks must be >= 1, got {self.chunks}")

    @classmethod
    def tool(cls, name: str, /, **arguments: Any) -> Reply:
        """A turn that only calls tool `name` with `arguments`."""
        return cls(tool_calls=(FakeToolCall(name, arguments),))

    @classmethod
    def actions(cls, *actions: Mapping[str, Any]) -> Reply:
        """A turn that calls `computer_action` (`ComputerAgent`'s tool) with a batch of
        computer/1 actions, e.g. `Reply.actions({"type": "key", "key": "Return"})`."""
        return cls(tool_calls=(FakeToolCall("computer_action", {"actions": list(actions)}),))


FaultKind = Literal["status", "reset", "malformed_json", "missing_tool_calls", "slow"]


@dataclass(frozen=True, slots=True)
class Fault:
    """A failure the server plays instead of (or before) the next reply.

    Build one with the class methods; `FakeModelServer.inject` queues it. A fault never
    consumes the policy's script, except `slow`, which delays the real reply.
    """

    kind: FaultKind
    code: int = 0
    retry_after: float | None = None
    message: str | None = None
    headers: tuple[tuple[str, str], ...] = ()
    mid_body: bool = True
    broken_arguments: bool = False
    seconds: float = 0.0

    @classmethod
    def status(
        cls,
        code: int,
        *,
        retry_after: float | None = None,
        message: str | None = None,
        headers: Mapping[str, str] | None = None,
    ) -> Fault:
        """An HTTP error with the provider's error body (429, 500, 503, 529, 408, 413...).

        `retry_after` sets the `retry-after` header (seconds); `headers` adds others.
        """
        if not 400 <= code <= 599:
            raise ValueError(f"an error status is 4xx or 5xx, got {code}")
        return cls(
            "status",
            code=code,
            retry_after=retry_after,
            message=message,
            headers=tuple((headers or {}).items()),
        )

    @classmethod
    def reset(cls, *, mid_body: bool = True) -> Fault:
        """The connection is reset: part-way through a 200 body, or before any response."""
        return cls("reset", mid_body=mid_body)

    @classmethod
    def malformed_json(cls) -> Fault:
        """A 200 whose JSON (or one streamed event's JSON) is cut short."""
        return cls("malformed_json")

    @classmethod
    def missing_tool_calls(cls, *, broken_arguments: bool = False) -> Fault:
        """A 200 that says it calls tools but has none, or whose arguments are not JSON."""
        return cls("missing_tool_calls", broken_arguments=broken_arguments)

    @classmethod
    def slow(cls, seconds: float) -> Fault:
        """Wait `seconds` before answering the reply as usual."""
        return cls("slow", seconds=seconds)
