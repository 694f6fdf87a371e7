"""The retry contract, as one pure state machine shared by the adapters and the proxy.

Each attempt's outcome has a cause. `throttled` (429, provider throttling) and `server`
(5xx, and Fireworks' 425) are retried without limit, with exponential backoff and
jitter capped at `max_delay`, waiting longer when the provider's retry-after says so.
`transport` (408, 409, connect and read errors) and `malformed` (an unusable answer)
each give up after their own streak of consecutive failures; a real response ends the
transport streak and a valid answer the malformed one, and neither counts toward the
other. `oversize` (413, or a 400 saying the request or prompt is too large) is retried
only with a strictly smaller payload, never with the same bytes. `refused` (other 4xx)
gives up at once.
"""

from __future__ import annotations

import email.utils
import math
import random
import re
import time
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass, fields
from typing import Any, NamedTuple, Protocol, TypeVar

import orjson

from .._errors import HttpError, ModelError, ModelRequestError, PayloadTooLarge, RetriesExhausted
from ._clock import Clock, SystemClock
from ._types import Attempt

__all__ = [
    "CAUSES",
    "Outcome",
    "Retrier",
    "RetryPolicy",
    "classify_status",
    "parse_retry_after",
    "retry_after_from",
]

CAUSES = frozenset({"ok", "throttled", "server", "transport", "malformed", "oversize", "refused"})

T = TypeVar("T")
P = TypeVar("P")


class HeaderLookup(Protocol):
    """Anything with a `get(name)`: a dict, `httpx2.Headers`, `proctor._http.Headers`."""

    def get(self, key: str, /) -> str | None: ...


@dataclass(frozen=True, slots=True)
class RetryPolicy:
    """How long to wait and when to give up.

    Args:
        base_delay: the first backoff, in seconds.
        multiplier: the backoff grows by this factor per consecutive failure.
        max_delay: the backoff cap (5xx and throttling are retried forever at this pace).
        jitter: the fraction of each backoff drawn at random (1.0 = full jitter,
            0.0 = none); retry-after is never shortened by it.
        max_transport: consecutive transport failures (408, 409, connect/read errors)
            after which the call gives up.
        max_malformed: consecutive malformed answers after which the call gives up.
        max_oversize: 413s answered by a smaller rewrite of the request, per call.
        max_retry_after: a clamp on the provider's retry-after; None honours any value.

    Raises:
        ValueError: a field is out of range.
    """

    base_delay: float = 1.0
    multiplier: float = 2.0
    max_delay: float = 60.0
    jitter: float = 1.0
    max_transport: int = 10
    max_malformed: int = 10
    max_oversize: int = 1
    max_retry_after: float | None = None

    def __post_init__(self) -> None:
        lows = {"multiplier": 1.0, "max_transport": 1, "max_malformed": 1}
        for f in fields(self):
            value = getattr(self, f.name)
            if value is None and f.name == "max_retry_after":
                continue
            if (
                not isinstance(value, int | float)
                or math.isnan(value)
                or value < lows.get(f.name, 0)
            ):
                raise ValueError(f"RetryPolicy.{f.name} out of range: {value!r}")
        if self.jitter > 1:
            raise ValueError(f"RetryPolicy.jitter must be within [0, 1], not {self.jitter!r}")


class Outcome(NamedTuple):
    """What one attempt amounted to, as `Retrier.run`'s classifier reports it."""

    cause: str
    status: int | None = None
    error: str | None = None
    retry_after: float | None = None


_THROTTLE = ("rate_limit", "overloaded", "throttl", "too_many_requests")
_QUOTA = ("insufficient_quota", "billing")
_TOO_LARGE = "request_too_large"
_TOO_LONG = (
    "body too long",
    "body too large",
    "prompt is too long",
    "context_length_exceeded",
    "maximum context length",
)
"""Phrases of a 400 that refuses the request for its size, in any provider's words
(Fireworks' "body too long", Anthropic's "prompt is too long", OpenAI's
`context_length_exceeded`): compaction can answer it, as a 413."""


def classify_status(status: int, body: Any = None) -> str:
    """The cause for an HTTP status, refined by the provider's error body.

    A 2xx is `ok` here; whether its body is usable is `check_response`'s call. An
    error body naming rate limits or overload (OpenAI `rate_limit_exceeded`, Anthropic
    `overloaded_error`) is `throttled` whatever the status; a 429 for an exhausted
    quota or billing is `refused`, since waiting cannot fix it. A 413, or a 400 naming
    `request_too_large` as its error type or code (Anthropic's type for a body over its
    limit) or saying the body or prompt is too long, is `oversize`. Fireworks' 425 (too
    early: the deployment is not ready) is `server`, retried like a 5xx; so is every 5xx,
    whatever advisory header (`x-should-retry: false`) came with it: an unconsumed
    turn cannot duplicate an action. `body` is the raw bytes or the decoded JSON.
    """
    if 200 <= status < 300:
        return "ok"
    kind = _error_kind(body) if status >= 400 else ""
    if any(marker in kind for marker in _QUOTA):
        return "refused"
    if status in (429, 529) or any(marker in kind for marker in _THROTTLE):
        return "throttled"
    if status in (408, 409):
        return "transport"
    if status == 413 or (status == 400 and _too_large(kind, body)):
        return "oversize"
    if status >= 500 or status == 425:
        return "server"
    return "refused"


def _too_large(kind: str, body: Any) -> bool:
    if _TOO_LARGE in kind:
        return True
    text = _error_message(body).lower()
    return any(phrase in kind or phrase in text for phrase in _TOO_LONG)


def _error_message(body: Any) -> str:
    """The `error.message` of a provider's error body, else the body's text."""
    if isinstance(body, bytes | str):
        try:
            body = orjson.loads(body)
        except orjson.JSONDecodeError:
            return body.decode(errors="replace") if isinstance(body, bytes) else body
    error = body.get("error") if isinstance(body, dict) else None
    message = error.get("message") if isinstance(error, dict) else error
    return message if isinstance(message, str) else ""


def _error_kind(body: Any) -> str:
    """The lowercased `error.type` and `error.code` of an OpenAI- or Anthropic-shaped body."""
    if isinstance(body, bytes | str):
        try:
            body = orjson.loads(body)
        except orjson.JSONDecodeError:
            return ""
    error = body.get("error") if isinstance(body, dict) else None
    if isinstance(error, str):
        return error.lower()
    if not isinstance(error, dict):
        return ""
    return " ".join(str(error.get(key) or "") for key in ("type", "code")).lower()


_DURATION = re.compile(
    r"(?:(\d+(?:\.\d+)?)h)?(?:(\d+(?:\.\d+)?)m(?!s))?(?:(\d+(?:\.\d+)?)s)?"
    r"(?:(\d+(?:\.\d+)?)ms)?"
)


def parse_retry_after(value: str | None, now: float | None = None) -> float | None:
    """Seconds to wait from a retry-after value, or None when absent or malformed.

    Accepts delta-seconds (`"120"`, `"1.5"`), an HTTP-date, and OpenAI's reset
    durations (`"6m0s"`, `"1.2s"`, `"20ms"`). `now` is the wall-clock time (Unix
    seconds) an HTTP-date is measured from; a date in the past means 0.
    """
    if value is None or not (value := value.strip()):
        return None
    try:
        seconds = float(value)
    except ValueError:
        duration = _parse_duration(value)
        return _parse_http_date(value, now) if duration is None else duration
    if math.isnan(seconds) or math.isinf(seconds) or seconds < 0:
        return None
    return seconds


def _parse_duration(value: str) -> float | None:
    match = _DURATION.fullmatch(value)
    if match is None or not any(match.groups()):
        return None
    h, m, s, ms = (float(g) if g else 0.0 for g in match.groups())
    return h * 3600 + m * 60 + s + ms / 1000


def _parse_http_date(value: str, now: float | None) -> float | None:
    try:
        when = email.utils.parsedate_to_datetime(value)
    except (TypeError, ValueError, IndexError):
        return None
    if when.tzinfo is None:
        return None
    return max(0.0, when.timestamp() - (time.time() if now is None else now))


def retry_after_from(
    headers: HeaderLookup | Mapping[str, str] | None, now: float | None = None
) -> float | None:
    """The provider's requested wait from response headers, or None.

    Looks at `retry-after-ms`, then `retry-after`, then OpenAI's
    `x-ratelimit-reset-{requests,tokens}` for a limit whose remaining count is 0.
    A plain mapping is matched case-insensitively.
    """
    if headers is None:
        return None
    if isinstance(headers, Mapping):
        headers = {str(k).lower(): str(v) for k, v in headers.items()}
    ms = parse_retry_after(headers.get("retry-after-ms"))
    if ms is not None:
        return ms / 1000
    seconds = parse_retry_after(headers.get("retry-after"), now)
    if seconds is not None:
        return seconds
    resets = [
        parse_retry_after(headers.get(f"x-ratelimit-reset-{kind}"))
        for kind in ("requests", "tokens")
        if (headers.get(f"x-ratelimit-remaining-{kind}") or "").strip() == "0"
    ]
    return max((r for r in resets if r is not None), default=None)


class Retrier:
    """The retry state machine for one model call.

    Drive it with `run`, or feed it outcomes yourself with `record` (the proxy does,
    since it streams). Every attempt lands in `attempts`.

    Args:
        policy: the limits and backoff; the default `RetryPolicy()` if None.
        clock: time source; `SystemClock()` if None, a `FakeClock` in tests.
        rng: the jitter's randomness; a fresh `random.Random()` if None.
    """

    def __init__(
        self,
        policy: RetryPolicy | None = None,
        clock: Clock | None = None,
        rng: random.Random | None = None,
    ) -> None:
        self.policy = policy or RetryPolicy()
        self.clock: Clock = clock or SystemClock()
        self._rng = rng or random.Random()
        self.attempts: list[Attempt] = []
        self.transport_streak = 0
        self.malformed_streak = 0
        self.oversize_retries = 0
        self._backoff = 0.0

    def record(
        self,
        cause: str,
        status: int | None = None,
        error: str | None = None,
        *,
        retry_after: float | None = None,
        started: float | None = None,
        duration: float = 0.0,
        rewritten: bool = False,
    ) -> float | None:
        """Account for one attempt and decide what comes next.

        Args:
            cause: one of `CAUSES`.
            status: the HTTP status, None when no response came back.
            error: a short description of what went wrong.
            retry_after: the provider's requested wait, in seconds.
            started: when the attempt began on the clock (default: now).
            duration: how long it took.
            rewritten: for `oversize`, the next try sends a strictly smaller payload.

        Returns:
            Seconds to wait before the next try, or None: stop, either because the
            call succeeded (`ok`) or because it gives up (see `failure`).

        Raises:
            ValueError: `cause` is not one of `CAUSES`.
        """
        if cause not in CAUSES:
            raise ValueError(f"unknown attempt cause {cause!r}")
        wait = self._next_wait(cause, retry_after, rewritten)
        self.attempts.append(
            Attempt(
                n=len(self.attempts) + 1,
                cause=cause,
                status=status,
                error=error,
                wait=wait or 0.0,
                started=self.clock.now() if started is None else started,
                duration=duration,
            )
        )
        return wait

    def _next_wait(self, cause: str, retry_after: float | None, rewritten: bool) -> float | None:
        policy = self.policy
        if cause == "transport":
            self.transport_streak += 1
            if self.transport_streak >= policy.max_transport:
                return None
        else:
            self.transport_streak = 0  # a real response, whatever it says
        if cause == "ok":
            self.malformed_streak = 0
            self._backoff = 0.0
            return None
        if cause == "refused":
            return None
        if cause == "oversize":
            if not rewritten or self.oversize_retries >= policy.max_oversize:
                return None
            self.oversize_retries += 1
            return 0.0
        if cause == "malformed":
            self.malformed_streak += 1
            if self.malformed_streak >= policy.max_malformed:
                return None
        return self._backoff_wait(retry_after)

    def _backoff_wait(self, retry_after: float | None) -> float:
        policy = self.policy
        grown = self._backoff * policy.multiplier if self._backoff else policy.base_delay
        self._backoff = min(policy.max_delay, grown)
        wait = self._backoff * (1.0 - policy.jitter * self._rng.random())
        if retry_after is not None:
            if policy.max_retry_after is not None:
                retry_after = min(retry_after, policy.max_retry_after)
            wait = max(wait, retry_after)
        return wait

    def failure(self) -> ModelError:
        """The error to raise for the last attempt, after `record` returned None."""
        if not self.attempts:
            return ModelError("no attempt was made")
        last = self.attempts[-1]
        detail = last.error or (f"HTTP {last.status}" if last.status else "no detail")
        kwargs: dict[str, Any] = {
            "status": last.status,
            "cause": last.cause,
            "attempts": self.attempts,
        }
        if last.cause == "refused":
            return ModelRequestError(f"the provider refused the request: {detail}", **kwargs)
        if last.cause == "oversize":
            return PayloadTooLarge(
                f"payload too large and no smaller rewrite left: {detail}", **kwargs
            )
        if last.cause in ("transport", "malformed"):
            streak = self.transport_streak if last.cause == "transport" else self.malformed_streak
            return RetriesExhausted(
                f"gave up after {streak} consecutive {last.cause} failures: {detail}", **kwargs
            )
        return ModelError(f"model call failed ({last.cause}): {detail}", **kwargs)

    async def run(
        self,
        send: Callable[[P], Awaitable[T]],
        payload: P,
        classify: Callable[[T], Outcome],
        *,
        shrink: Callable[[P], P | None] | None = None,
    ) -> T:
        """Send `payload` until an attempt is `ok`, following the contract.

        Args:
            send: one attempt. `HttpError`s it raises count as transport failures.
            payload: what `send` sends: bytes, JSON-able, or an object with an `nbytes`
                attribute (its size in bytes decides 413 retries).
            classify: the outcome of a result `send` returned.
            shrink: on 413, a smaller rewrite of the payload (e.g. compacted), or None.
                A rewrite that is not strictly smaller in bytes is never sent.

        Returns:
            The first result classified `ok`.

        Raises:
            ModelRequestError: a refused request.
            RetriesExhausted: a transport or malformed streak ran out.
            PayloadTooLarge: 413 without a smaller rewrite left.
        """
        while True:
            started = self.clock.now()
            try:
                result = await send(payload)
            except HttpError as exc:
                outcome = Outcome("transport", None, f"{type(exc).__name__}: {exc}")
            else:
                outcome = classify(result)
            duration = self.clock.now() - started
            rewritten = False
            if outcome.cause == "oversize" and shrink is not None and self._may_shrink():
                smaller = shrink(payload)
                if smaller is not None and _size(smaller) < _size(payload):
                    payload, rewritten = smaller, True
            wait = self.record(
                outcome.cause,
                outcome.status,
                outcome.error,
                retry_after=outcome.retry_after,
                started=started,
                duration=duration,
                rewritten=rewritten,
            )
            if outcome.cause == "ok":
                return result
            if wait is None:
                raise self.failure()
            if wait > 0:
                await self.clock.sleep(wait)

    def _may_shrink(self) -> bool:
        return self.oversize_retries < self.policy.max_oversize


def _size(payload: Any) -> int:
    if isinstance(payload, bytes | bytearray):
        return len(payload)
    if isinstance(payload, str):
        return len(payload.encode())
    nbytes = getattr(payload, "nbytes", None)
    return nbytes if isinstance(nbytes, int) else len(orjson.dumps(payload))
