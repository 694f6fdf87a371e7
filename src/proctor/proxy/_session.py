"""One rollout's view of the proxy: its secret, limits, counters and recorded turns."""

from __future__ import annotations

import asyncio
import secrets
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from ..models import Usage
    from ..records._records import Trace

__all__ = ["ModelLimits", "ProxySession", "Replay", "SharedBudget"]

if TYPE_CHECKING:
    from ..records._records import Step


@dataclass(frozen=True, slots=True)
class ModelLimits:
    """Per-rollout budgets the proxy enforces; None means unlimited.

    Token budgets are cumulative over the rollout's turns (input counts every turn's
    whole prompt, as providers bill it). They are checked when a turn starts: a turn
    that would start with a budget already spent is refused; the turn that crosses a
    budget, and any turn of the same rollout already in flight, completes and is
    recorded. `max_turns` is exact even under concurrency (turns count on admission).
    """

    max_turns: int | None = None
    max_input_tokens: int | None = None
    max_output_tokens: int | None = None
    max_total_tokens: int | None = None
    max_cost: float | None = None

    def __post_init__(self) -> None:
        for name in (
            "max_turns",
            "max_input_tokens",
            "max_output_tokens",
            "max_total_tokens",
            "max_cost",
        ):
            value = getattr(self, name)
            if value is not None and value < 0:
                raise ValueError(f"ModelLimits.{name} must be >= 0, got {value!r}")


class SharedBudget:
    """A cost cap (USD) shared by many sessions, on one proxy or several (a batch's).

    Once `spent` reaches `max_cost`, every session sharing it refuses new turns with
    stop reason `batch_cost_cap`; turns already in flight complete and are counted.
    """

    __slots__ = ("max_cost", "spent")

    def __init__(self, max_cost: float | None, spent: float = 0.0) -> None:
        if max_cost is not None and max_cost < 0:
            raise ValueError(f"SharedBudget.max_cost must be >= 0, got {max_cost!r}")
        self.max_cost = max_cost
        self.spent = spent

    def __repr__(self) -> str:
        return f"<SharedBudget spent={self.spent:.6f} max_cost={self.max_cost}>"

    @property
    def reached(self) -> bool:
        """Whether the cap is spent."""
        return self.max_cost is not None and self.spent >= self.max_cost


@dataclass(frozen=True, slots=True)
class Replay:
    """A committed answer, resent verbatim to a retry with the same idempotency key."""

    status: int
    headers: list[tuple[str, str]]
    body: bytes


class _KeyState:
    """One idempotency key of a session: one turn, however many times it is sent.

    While a try is in flight, a retry waits for it; if it committed an answer, the
    retry gets that answer; if it failed, the retry forwards again as the same turn.
    """

    __slots__ = ("digest", "index", "key", "replay", "step", "waiter")

    def __init__(self, key: str, digest: bytes) -> None:
        self.key = key
        self.digest = digest  # of the request body: a key reused for another body is refused
        self.replay: Replay | None = None
        self.waiter: asyncio.Future[None] | None = None
        self.index: int | None = None  # this key's turn in `session.turns`
        self.step: Step | None = None  # and on the trace

    def begin(self) -> None:
        self.waiter = asyncio.get_running_loop().create_future()

    def settle(self, replay: Replay | None) -> None:
        """End a try: with the answer to replay, or None to let a retry go again."""
        self.replay = replay
        if self.waiter is not None and not self.waiter.done():
            self.waiter.set_result(None)
        self.waiter = None

    async def settled(self) -> bool:
        """Wait for the try in flight, if any; False if the session ended meanwhile."""
        while self.waiter is not None:
            try:
                await asyncio.shield(self.waiter)
            except asyncio.CancelledError:
                task = asyncio.current_task()
                if task is not None and task.cancelling():
                    raise
                return False
        return True


class ProxySession:
    """A rollout registered with an `InterceptionProxy`.

    Requests bearing `secret` are this rollout's; their turns land on `trace` (as
    `model_turn` steps) and in `turns`. After `close()` every request gets 409.

    Attributes:
        secret: the bearer token the harness uses as its API key.
        base_url: the proxy's OpenAI-compatible base URL (ends in `/v1`).
        stop_reason: why the proxy refused a turn (`max_turns`, `max_input_tokens`,
            `max_output_tokens`, `max_total_tokens`, `max_cost`, `batch_cost_cap`),
            else None.
        on_turn: called with each recorded turn (a retry of an idempotency key calls
            it again with the same `turn` number: the later call wins).
    """

    def __init__(
        self,
        rollout_id: str,
        base_url: str,
        limits: ModelLimits,
        trace: Trace | None,
        on_close: Callable[[ProxySession], None] | None = None,
        shared: SharedBudget | None = None,
    ) -> None:
        self.rollout_id = rollout_id
        self.secret = "sk-proctor-" + secrets.token_urlsafe(32)
        self.base_url = base_url
        self.limits = limits
        self.trace = trace
        self.turns: list[dict[str, Any]] = []
        # Turns let through, counted on admission so max_turns holds under concurrency.
        self.admitted = 0
        self.input_tokens = 0
        self.output_tokens = 0
        self.cost = 0.0
        self.stop_reason: str | None = None
        self.closed = False
        self.keys: dict[str, _KeyState] = {}
        self.waits: set[asyncio.Future[None]] = set()  # backoff sleeps, cut short by close()
        self._on_close = on_close
        self.shared = shared
        self.on_turn: Callable[[dict[str, Any]], None] | None = None

    def __repr__(self) -> str:
        state = "closed" if self.closed else "open"
        return f"<ProxySession {self.rollout_id} {state} turns={len(self.turns)}>"

    @property
    def env(self) -> dict[str, str]:
        """Environment variables that point an OpenAI or Anthropic client at this session."""
        root = self.base_url.removesuffix("/v1")
        return {
            "OPENAI_BASE_URL": self.base_url,
            "OPENAI_API_KEY": self.secret,
            "ANTHROPIC_BASE_URL": root,
            "ANTHROPIC_API_KEY": self.secret,
        }

    @property
    def total_tokens(self) -> int:
        """Input plus output tokens used so far."""
        return self.input_tokens + self.output_tokens

    def close(self) -> None:
        """End the session: later requests get 409, turns waiting to retry give up, and
        requests waiting on an idempotency key are released. Idempotent."""
        if self.closed:
            return
        self.closed = True
        for state in self.keys.values():
            if state.waiter is not None:
                state.waiter.cancel()
        for sleep in self.waits:
            sleep.cancel()
        self.keys.clear()  # nothing can be replayed any more; free the bodies
        self.waits.clear()
        if self._on_close is not None:
            self._on_close(self)

    def over_limit(self) -> str | None:
        """The first budget already spent (a turn must not start), else None."""
        lim = self.limits
        if lim.max_turns is not None and self.admitted >= lim.max_turns:
            return "max_turns"
        if lim.max_input_tokens is not None and self.input_tokens >= lim.max_input_tokens:
            return "max_input_tokens"
        if lim.max_output_tokens is not None and self.output_tokens >= lim.max_output_tokens:
            return "max_output_tokens"
        if lim.max_total_tokens is not None and self.total_tokens >= lim.max_total_tokens:
            return "max_total_tokens"
        if lim.max_cost is not None and self.cost >= lim.max_cost:
            return "max_cost"
        if self.shared is not None and self.shared.reached:
            return "batch_cost_cap"
        return None

    def account(self, usage: Usage, cost: float | None) -> None:
        """Add one completed turn's usage to the counters."""
        self.input_tokens += usage.input_tokens
        self.output_tokens += usage.output_tokens
        if cost is not None:
            self.cost += cost
            if self.shared is not None:
                self.shared.spent += cost

    def record(self, turn: dict[str, Any], start: float, state: _KeyState | None = None) -> None:
        """Keep one turn and put it on the rollout's trace.

        A retry of an idempotency key replaces that key's turn (its attempts appended
        to the earlier ones) instead of adding another.
        """
        data = {k: v for k, v in turn.items() if k != "message"}
        if state is not None and state.index is not None:
            earlier = self.turns[state.index]
            turn["attempts"] = earlier["attempts"] + turn["attempts"]
            turn["turn"] = data["turn"] = earlier["turn"]
            data["attempts"] = turn["attempts"]
            self.turns[state.index] = turn
            if state.step is not None:
                state.step.content = turn.get("message")
                state.step.data = data
                state.step.end = time.time()
            self._heard(turn)
            return
        turn["turn"] = data["turn"] = len(self.turns) + 1
        self.turns.append(turn)
        step = None
        if self.trace is not None:
            step = self.trace.add("model_turn", turn.get("message"), start=start, **data)
        if state is not None:
            state.index = len(self.turns) - 1
            state.step = step
        self._heard(turn)

    def _heard(self, turn: dict[str, Any]) -> None:
        if self.on_turn is not None:
            self.on_turn(turn)
