"""One rollout's view of the proxy: its secret, limits, counters and recorded turns."""

from __future__ import annotations

import asyncio
import secrets
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from .._http import Share
from ..records import Step
from ._frames import Frames
from ._history import History
from ._quotas import NO_HOLD, Hold, SessionQuotas

if TYPE_CHECKING:
    from ..models import Usage
    from ..records import Trace

__all__ = ["WAIT", "ModelLimits", "ProxySession", "Replay", "SharedBudget"]

WAIT = "wait"  # `try_admit`: no room for the turn until one in flight ends
# Recorded request bytes past which requests share the messages they repeat (it costs
# CPU per turn; a short record is not worth it).
_SHARE_FROM = 1024 * 1024


@dataclass(frozen=True, slots=True)
class ModelLimits:
    """Per-rollout budgets the proxy enforces; None means unlimited.

    Token budgets are cumulative over the rollout's turns (input counts every turn's
    whole prompt, as providers bill it). A turn in flight holds its worst case (see
    `Hold`) against them until its usage is known: a turn starts only while its
    budgets are not spent counting the holds of the turns in flight (else it waits
    for one to end, and is refused once a budget is spent). So concurrent turns
    overshoot a budget no more than one turn run alone does: the turn that crosses
    it completes and is recorded. `max_turns` is exact (turns count on admission).
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
    stop reason `batch_cost_cap`. Turns in flight hold their worst-case cost (`held`)
    against it as against a session's `max_cost`: a turn starts only while `spent`
    plus `held` is below the cap, else it waits for a turn to end.
    """

    __slots__ = ("held", "max_cost", "spent", "waiters")

    def __init__(self, max_cost: float | None, spent: float = 0.0) -> None:
        if max_cost is not None and max_cost < 0:
            raise ValueError(f"SharedBudget.max_cost must be >= 0, got {max_cost!r}")
        self.max_cost = max_cost
        self.spent = spent
        self.held = 0.0
        self.waiters: set[asyncio.Future[None]] = set()  # turns waiting for room

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
        on_turn: a sink for recorded turns, called with each (a retry of an
            idempotency key calls it again with the same `turn` number: the later call
            wins). Once set, a turn's request body goes to it and is not kept in
            `turns` or on the trace (the sink records it).
        frames: how the harness's inline images are recorded (`Frames`): each once,
            by digest; set `Frames(sink)` to have them kept as files the recorded
            requests refer to (a batch keeps them in the rollout's `artifacts/frames/`).
        share: what the session may hold of the proxy's HTTP server (`SessionQuotas`).
        in_flight: turns forwarded and not yet recorded.
        recorded: request body bytes kept in memory for `turns` and the trace (past
            1 MiB, the messages a request repeats from the one before are kept once;
            an image counts once, or as its reference when `frames` has a sink).
    """

    def __init__(
        self,
        rollout_id: str,
        base_url: str,
        limits: ModelLimits,
        trace: Trace | None,
        on_close: Callable[[ProxySession], None] | None = None,
        shared: SharedBudget | None = None,
        quotas: SessionQuotas | None = None,
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
        self.frames = Frames()
        self.quotas = quotas = quotas or SessionQuotas()
        self.share = Share(quotas.max_requests, quotas.max_buffered, owner=self)
        self.in_flight = 0
        self.recorded = 0
        self._history = History()  # recorded requests share the messages they repeat
        self._held = NO_HOLD  # the holds of the turns in flight, summed
        self._waiters: set[asyncio.Future[None]] = set()
        lim = limits
        # Whether its turns hold their worst case: any token budget; any cost budget.
        self.priced = lim.max_cost is not None or (
            shared is not None and shared.max_cost is not None
        )
        tokens = (lim.max_input_tokens, lim.max_output_tokens, lim.max_total_tokens)
        self.metered = self.priced or any(v is not None for v in tokens)

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
        _wake(self._waiters)
        self.keys.clear()  # nothing can be replayed any more; free the bodies
        self.waits.clear()
        if self._on_close is not None:
            self._on_close(self)

    def over_limit(self, turns: bool = True) -> str | None:
        """The first budget already spent (a turn must not start), else None; `turns`
        False leaves `max_turns` out (a retry of a turn already counted)."""
        lim = self.limits
        if turns and lim.max_turns is not None and self.admitted >= lim.max_turns:
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
        if self.recorded >= self.quotas.max_recorded:
            return "max_recorded_bytes"
        return None

    async def admit(self, hold: Hold, count: bool) -> str | None:
        """Wait for room for a turn (a slot and its hold within the budgets), then take
        it: None, or why it is refused (a budget spent, or `rollout_ended`).

        `count` counts it against `max_turns` (not a retry of an idempotency key).
        """
        while (reason := self.try_admit(hold, count)) == WAIT:
            await self._changed()
        return reason

    def try_admit(self, hold: Hold, count: bool) -> str | None:
        """`admit` without waiting: `WAIT` when there is no room yet."""
        if self.closed:
            return "rollout_ended"
        reason = self.over_limit(count)
        if reason is not None:
            return reason
        if not self._room():
            return WAIT
        if count:
            self.admitted += 1
        self.in_flight += 1
        if hold is not NO_HOLD:
            held = self._held
            self._held = Hold(
                held.input_tokens + hold.input_tokens,
                held.output_tokens + hold.output_tokens,
                held.cost + hold.cost,
            )
            if self.shared is not None:
                self.shared.held += hold.cost
        return None

    def release(self, hold: Hold) -> None:
        """A turn admitted with `hold` ended (its usage is accounted): free its slot."""
        self.in_flight -= 1
        if hold is not NO_HOLD:
            held = self._held
            self._held = Hold(
                held.input_tokens - hold.input_tokens,
                held.output_tokens - hold.output_tokens,
                held.cost - hold.cost,
            )
            if self.shared is not None:
                self.shared.held -= hold.cost
                if self.shared.waiters:
                    _wake(self.shared.waiters)
        if self._waiters:
            _wake(self._waiters)

    def _room(self) -> bool:
        """Whether a turn may start now: a slot is free and no budget is spent counting
        the holds of the turns in flight."""
        if self.in_flight >= self.quotas.max_in_flight:
            return False
        if not self.metered:
            return True
        lim, held = self.limits, self._held
        inputs = self.input_tokens + held.input_tokens
        outputs = self.output_tokens + held.output_tokens
        if lim.max_input_tokens is not None and inputs >= lim.max_input_tokens:
            return False
        if lim.max_output_tokens is not None and outputs >= lim.max_output_tokens:
            return False
        if lim.max_total_tokens is not None and inputs + outputs >= lim.max_total_tokens:
            return False
        if lim.max_cost is not None and self.cost + held.cost >= lim.max_cost:
            return False
        shared = self.shared
        if shared is None or shared.max_cost is None:
            return True
        return shared.spent + shared.held < shared.max_cost

    async def _changed(self) -> None:
        """Wait until a turn of this session (or of the shared budget) ends."""
        waiter: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        self._waiters.add(waiter)
        if self.shared is not None:
            self.shared.waiters.add(waiter)
        try:
            await waiter
        finally:
            self._waiters.discard(waiter)
            if self.shared is not None:
                self.shared.waiters.discard(waiter)

    def account(self, usage: Usage, cost: float | None) -> None:
        """Add one completed turn's usage to the counters."""
        self.input_tokens += usage.input_tokens
        self.output_tokens += usage.output_tokens
        if cost is not None:
            self.cost += cost
            if self.shared is not None:
                self.shared.spent += cost

    def record(
        self,
        turn: dict[str, Any],
        start: float,
        state: _KeyState | None = None,
        size: int = 0,
        *,
        images: bool = True,
    ) -> None:
        """Keep one turn and put it on the rollout's trace; `size` is its request's bytes.

        A retry of an idempotency key replaces that key's turn (its attempts appended
        to the earlier ones) instead of adding another. With an `on_turn` sink, the
        sink gets the whole turn and memory keeps it without its request body. Inline
        images are kept once first (`frames`), unless `images` says the request holds
        none.
        """
        sink = self.on_turn
        if images and (sink is None or self.frames.sink is not None):  # a sink alone keeps none
            request, saved = self.frames.strip(turn.get("request"))
            turn["request"], size = request, max(0, size - saved)
        if sink is None:
            if self.recorded >= _SHARE_FROM:
                size = self._history.keep(turn.get("request"), size)
            self.recorded += size
            data = turn.copy()
        else:
            data = turn.copy()
            data.pop("request", None)
        data.pop("message", None)
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
        if self.trace is not None:  # (`Trace.add` would copy `data` once more)
            step = Step("model_turn", turn.get("message"), data, start, time.time())
            self.trace.steps.append(step)
        if state is not None:
            state.index = len(self.turns) - 1
            state.step = step
        self._heard(turn)

    def _heard(self, turn: dict[str, Any]) -> None:
        sink = self.on_turn
        if sink is not None:
            sink(turn)
            turn.pop("request", None)  # the sink keeps it


def _wake(waiters: set[asyncio.Future[None]]) -> None:
    for waiter in waiters:
        if not waiter.done():
            waiter.set_result(None)
