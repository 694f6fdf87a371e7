"""Per-session quotas of the interception proxy, and the worst case a turn reserves
against its session's budgets while it is in flight."""

from __future__ import annotations

from dataclasses import dataclass, fields
from typing import Any

from ..models import Usage, cost

__all__ = ["Hold", "SessionQuotas"]

MiB = 1024 * 1024
# Request bytes per input token assumed for a turn's reservation: about 4 characters a
# token for English text; JSON framing makes it an overestimate for most prompts.
_BYTES_PER_TOKEN = 4
_MAX_FIELDS = ("max_tokens", "max_completion_tokens", "max_output_tokens")


@dataclass(frozen=True, slots=True)
class SessionQuotas:
    """What one session (one rollout's secret) may hold of an `InterceptionProxy`,
    whatever its budgets: the same for every session of the proxy.

    Args:
        max_in_flight: turns forwarded upstream at once; more wait for one to end.
        max_requests: requests the proxy holds at once (from head to the end of the
            response, waiting ones included); the next gets 429 `session_busy`.
        max_buffered: request body bytes held at once (a `Content-Length` in full from
            the head): a body over it alone gets 413 `request_too_large`, a request
            that would go over it 429 `session_busy`.
        max_recorded: request body bytes kept in memory for the session's record
            (`session.turns` and the trace) when no `on_turn` sink takes its turns;
            once reached, further turns are refused (400 `max_recorded_bytes`). With a
            sink (a batch writes `model_turns.jsonl`), request bodies are handed to it
            and not kept.
        default_max_tokens: the output a turn reserves against token and cost budgets
            when its request sets no `max_tokens`, `max_completion_tokens` or
            `max_output_tokens`.

    Raises:
        ValueError: a field is not a positive integer.
    """

    max_in_flight: int = 8
    max_requests: int = 64
    max_buffered: int = 256 * MiB
    max_recorded: int = 256 * MiB
    default_max_tokens: int = 4096

    def __post_init__(self) -> None:
        for f in fields(self):
            value = getattr(self, f.name)
            if not isinstance(value, int) or isinstance(value, bool) or value < 1:
                raise ValueError(f"SessionQuotas.{f.name} must be a positive int, got {value!r}")


@dataclass(frozen=True, slots=True)
class Hold:
    """The worst case of one turn in flight, held against its session's budgets from
    admission until its usage is known: its prompt's estimated tokens (request bytes
    / 4), its output cap (the request's maximum, else `default_max_tokens`, times `n`)
    and what these would cost."""

    input_tokens: int = 0
    output_tokens: int = 0
    cost: float = 0.0

    @classmethod
    def of(cls, body: dict[str, Any], size: int, model: str | None, quotas: SessionQuotas) -> Hold:
        """The hold for a request `body` of `size` bytes sent to `model` (None: no cost
        held, as for a model the price table does not know)."""
        output = quotas.default_max_tokens
        for name in _MAX_FIELDS:
            if given := _positive(body.get(name)):
                output = given
                break
        output *= _positive(body.get("n")) or 1
        prompt = -(-size // _BYTES_PER_TOKEN)
        price = None
        if model is not None:
            price = cost(model, Usage(input_tokens=prompt, output_tokens=output))
        return cls(prompt, output, price or 0.0)


NO_HOLD = Hold()


def _positive(value: Any) -> int:
    """A positive int value, else 0."""
    return value if isinstance(value, int) and not isinstance(value, bool) and value > 0 else 0
