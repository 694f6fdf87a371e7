"""The retry contract: the `Retrier` state machine, driven by outcomes, with a fake clock."""

from __future__ import annotations

import contextlib
import random
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from proctor._errors import (
    HttpReadError,
    ModelError,
    ModelRequestError,
    PayloadTooLarge,
    RetriesExhausted,
)
from proctor.models import RetryPolicy
from proctor.models._retry import (
    CAUSES,
    Outcome,
    Retrier,
    classify_status,
    parse_retry_after,
    retry_after_from,
)
from proctor.testing import FakeClock

EXACT = RetryPolicy(jitter=0.0)


def retrier(policy: RetryPolicy = EXACT, seed: int = 0) -> Retrier:
    return Retrier(policy, FakeClock(), random.Random(seed))


# -- record(): one step at a time -----------------------------------------------------


def test_backoff_doubles_from_base_and_caps_at_max_delay() -> None:
    r = retrier()
    waits = [r.record("server", 500) for _ in range(9)]
    assert waits == [1.0, 2.0, 4.0, 8.0, 16.0, 32.0, 60.0, 60.0, 60.0]


def test_throttling_and_5xx_are_retried_without_limit() -> None:
    r = retrier()
    waits = [
        r.record("throttled" if i % 2 else "server", 429 if i % 2 else 503) for i in range(1000)
    ]
    assert waits[6:] == [60.0] * 994 and len(r.attempts) == 1000


def test_a_longer_retry_after_is_honoured_and_a_shorter_one_is_not() -> None:
    r = retrier()
    assert r.record("throttled", 429, retry_after=30.0) == 30.0
    assert r.record("throttled", 429, retry_after=0.5) == 2.0  # the backoff is longer
    assert r.record("server", 503, retry_after=100.0) == 100.0


def test_max_retry_after_clamps_absurd_values() -> None:
    r = retrier(RetryPolicy(jitter=0.0, max_retry_after=120.0))
    assert r.record("throttled", 429, retry_after=86400.0) == 120.0


def test_jitter_draws_within_the_backoff_and_never_shortens_retry_after() -> None:
    r = retrier(RetryPolicy(jitter=1.0), seed=7)
    for i in range(50):
        cap = min(60.0, 2.0**i)
        wait = r.record("server", 500)
        assert wait is not None and 0.0 <= wait <= cap
    assert r.record("throttled", 429, retry_after=75.0) == 75.0


def test_half_jitter_keeps_the_upper_half() -> None:
    r = retrier(RetryPolicy(jitter=0.5, base_delay=10.0, max_delay=10.0), seed=3)
    waits = [r.record("throttled", 429) for _ in range(100)]
    assert all(w is not None and 5.0 <= w <= 10.0 for w in waits)


def test_transport_gives_up_on_the_tenth_consecutive_failure() -> None:
    r = retrier()
    waits = [r.record("transport", None, "reset") for _ in range(10)]
    assert all(w is not None for w in waits[:9]) and waits[9] is None
    exc = r.failure()
    assert isinstance(exc, RetriesExhausted) and exc.cause == "transport"
    assert len(exc.attempts) == 10 and "10 consecutive transport" in str(exc)


def test_408_and_409_count_toward_the_transport_streak() -> None:
    assert classify_status(408) == classify_status(409) == "transport"
    r = retrier()
    for i in range(9):
        assert r.record("transport", 408 if i % 2 else 409) is not None
    assert r.record("transport", 408) is None


def test_any_real_response_resets_the_transport_streak() -> None:
    r = retrier()
    for cause in ("throttled", "server", "malformed", "oversize"):
        for _ in range(9):
            assert r.record("transport") is not None
        r.record(cause, rewritten=True)
        assert r.transport_streak == 0
    for _ in range(9):
        assert r.record("transport") is not None


def test_malformed_gives_up_on_the_tenth_and_only_a_valid_answer_resets_it() -> None:
    r = retrier()
    for _ in range(9):
        assert r.record("malformed", 200, "no tool call") is not None
        # transport errors and throttling in between neither reset nor count
        assert r.record("transport") is not None
        assert r.record("throttled", 429) is not None
    assert r.record("malformed", 200, "no tool call") is None
    assert isinstance(r.failure(), RetriesExhausted)
    assert r.failure().cause == "malformed"


def test_ok_resets_the_malformed_streak_and_the_backoff() -> None:
    r = retrier()
    for _ in range(9):
        r.record("malformed", 200)
    assert r.record("ok", 200) is None
    assert r.malformed_streak == 0
    assert r.record("server", 500) == 1.0
    for _ in range(9):
        assert r.record("malformed", 200) is not None


def test_the_counters_never_consume_one_another() -> None:
    r = retrier()
    for _ in range(9):
        r.record("transport")
    for _ in range(9):
        assert r.record("malformed") is not None
    for _ in range(9):
        assert r.record("transport") is not None
    assert (r.transport_streak, r.malformed_streak) == (9, 9)


def test_refused_gives_up_at_once() -> None:
    r = retrier()
    assert r.record("refused", 400, "HTTP 400: bad") is None
    exc = r.failure()
    assert isinstance(exc, ModelRequestError) and exc.status == 400 and "bad" in str(exc)


def test_oversize_is_retried_once_only_after_a_rewrite() -> None:
    r = retrier()
    assert r.record("oversize", 413) is None
    assert isinstance(r.failure(), PayloadTooLarge)
    r = retrier()
    assert r.record("oversize", 413, rewritten=True) == 0.0
    assert r.record("oversize", 413, rewritten=True) is None
    assert r.oversize_retries == 1


def test_unknown_cause_is_a_value_error() -> None:
    with pytest.raises(ValueError, match="unknown attempt cause"):
        retrier().record("flaky")


def test_attempts_are_numbered_timed_and_carry_their_wait() -> None:
    r = retrier()
    r.record("server", 502, "bad gateway", started=5.0, duration=0.25)
    r.record("ok", 200, started=6.0, duration=0.5)
    first, second = r.attempts
    assert (first.n, first.cause, first.status, first.error) == (1, "server", 502, "bad gateway")
    assert (first.wait, first.started, first.duration) == (1.0, 5.0, 0.25)
    assert (second.n, second.cause, second.wait) == (2, "ok", 0.0)
    assert first.to_dict()["cause"] == "server"


def test_failure_without_attempts_is_a_model_error() -> None:
    assert type(retrier().failure()) is ModelError


@pytest.mark.parametrize(
    "field, value",
    [
        ("base_delay", -1.0),
        ("multiplier", 0.5),
        ("max_delay", -1.0),
        ("jitter", 1.5),
        ("jitter", -0.1),
        ("max_transport", 0),
        ("max_malformed", 0),
        ("max_oversize", -1),
        ("max_retry_after", -1.0),
        ("base_delay", float("nan")),
    ],
)
def test_policy_rejects_out_of_range_values(field: str, value: float) -> None:
    with pytest.raises(ValueError, match=field):
        RetryPolicy(**{field: value})  # type: ignore[arg-type]  # one float field at a time


# -- the state machine against a reference model --------------------------------------

outcome = st.tuples(
    st.sampled_from(sorted(CAUSES - {"ok", "refused"}) * 3 + ["ok", "refused"]),
    st.none() | st.floats(0.0, 200.0),
    st.booleans(),
)


@settings(max_examples=400, deadline=None)
@given(
    steps=st.lists(outcome, max_size=80),
    max_transport=st.integers(1, 12),
    max_malformed=st.integers(1, 12),
    max_oversize=st.integers(0, 2),
    jitter=st.sampled_from([0.0, 0.5, 1.0]),
)
def test_record_follows_the_contract(
    steps: list[tuple[str, float | None, bool]],
    max_transport: int,
    max_malformed: int,
    max_oversize: int,
    jitter: float,
) -> None:
    policy = RetryPolicy(
        jitter=jitter,
        max_transport=max_transport,
        max_malformed=max_malformed,
        max_oversize=max_oversize,
    )
    r = Retrier(policy, FakeClock(), random.Random(0))
    transport = malformed = oversize = 0
    for cause, retry_after, rewritten in steps:
        wait = r.record(cause, retry_after=retry_after, rewritten=rewritten)
        transport = transport + 1 if cause == "transport" else 0
        malformed = 0 if cause == "ok" else malformed + (cause == "malformed")
        if cause in ("ok", "refused"):
            assert wait is None
        elif cause == "transport":
            assert (wait is None) == (transport >= max_transport)
        elif cause == "malformed":
            assert (wait is None) == (malformed >= max_malformed)
        elif cause == "oversize":
            assert (wait is None) == (not rewritten or oversize >= max_oversize)
            oversize += wait is not None
            assert wait in (None, 0.0)
        else:  # throttled, server: never give up
            assert wait is not None
            assert wait <= max(policy.max_delay, retry_after or 0.0)
            if retry_after is not None:
                assert wait >= retry_after
        assert (r.transport_streak, r.malformed_streak) == (transport, malformed)
        assert r.attempts[-1].wait == (wait or 0.0)
        if wait is None:
            break
    _assert_streaks_bounded(r, max_transport, max_malformed)


def _assert_streaks_bounded(r: Retrier, max_transport: int, max_malformed: int) -> None:
    transport = malformed = 0
    for attempt in r.attempts:
        transport = transport + 1 if attempt.cause == "transport" else 0
        malformed = 0 if attempt.cause == "ok" else malformed + (attempt.cause == "malformed")
        assert transport <= max_transport and malformed <= max_malformed


# -- run(): the loop ------------------------------------------------------------------


class Script:
    """A fake `send`: returns (or raises) scripted outcomes and records what it sent."""

    def __init__(self, outcomes: list[Outcome | Exception]) -> None:
        self.outcomes = list(outcomes)
        self.sent: list[Any] = []

    async def __call__(self, payload: Any) -> Outcome:
        self.sent.append(payload)
        item = self.outcomes.pop(0) if self.outcomes else Outcome("ok", 200)
        if isinstance(item, Exception):
            raise item
        return item


def same(outcome: Outcome) -> Outcome:
    return outcome


async def test_run_retries_until_ok_and_sleeps_the_waits() -> None:
    clock = FakeClock()
    send = Script(
        [
            Outcome("throttled", 429, retry_after=7.0),
            Outcome("server", 503),
            HttpReadError("reset"),
            Outcome("malformed", 200, "no choices"),
        ]
    )
    r = Retrier(EXACT, clock)
    result = await r.run(send, b"payload", same)
    assert result.cause == "ok"
    assert clock.sleeps == [7.0, 2.0, 4.0, 8.0]
    assert [a.cause for a in r.attempts] == [
        "throttled",
        "server",
        "transport",
        "malformed",
        "ok",
    ]
    assert r.attempts[2].error == "HttpReadError: reset"


async def test_run_raises_after_ten_transport_errors_without_sleeping_the_last() -> None:
    clock = FakeClock()
    send = Script([HttpReadError("reset")] * 20)
    with pytest.raises(RetriesExhausted) as info:
        await Retrier(EXACT, clock).run(send, b"x", same)
    assert len(send.sent) == 10 and len(info.value.attempts) == 10
    assert clock.sleeps == [1.0, 2.0, 4.0, 8.0, 16.0, 32.0, 60.0, 60.0, 60.0]


async def test_run_lets_other_exceptions_through() -> None:
    with pytest.raises(ZeroDivisionError):
        await retrier().run(Script([ZeroDivisionError()]), b"x", same)


async def test_run_refuses_at_once() -> None:
    send = Script([Outcome("refused", 401, "HTTP 401: bad key")])
    with pytest.raises(ModelRequestError, match="bad key"):
        await retrier().run(send, b"x", same)
    assert len(send.sent) == 1


async def test_413_without_shrink_never_resends() -> None:
    send = Script([Outcome("oversize", 413)])
    with pytest.raises(PayloadTooLarge):
        await retrier().run(send, b"x" * 100, same)
    assert send.sent == [b"x" * 100]


async def test_413_resends_once_only_a_strictly_smaller_payload() -> None:
    send = Script([Outcome("oversize", 413), Outcome("oversize", 413)])
    with pytest.raises(PayloadTooLarge):
        await retrier().run(send, b"x" * 100, same, shrink=lambda p: p[: len(p) // 2])
    assert send.sent == [b"x" * 100, b"x" * 50]


@pytest.mark.parametrize("rewrite", [lambda p: p, lambda p: p + b"!", lambda p: None])
async def test_413_with_a_rewrite_that_is_not_smaller_is_not_sent(rewrite: Any) -> None:
    send = Script([Outcome("oversize", 413)])
    with pytest.raises(PayloadTooLarge):
        await retrier().run(send, b"x" * 100, same, shrink=rewrite)
    assert len(send.sent) == 1


async def test_413_measures_json_payloads_and_nbytes() -> None:
    class Sized:
        def __init__(self, nbytes: int) -> None:
            self.nbytes = nbytes

    send = Script([Outcome("oversize", 413)])
    await retrier().run(send, Sized(10), same, shrink=lambda p: Sized(9))
    assert [p.nbytes for p in send.sent] == [10, 9]
    send = Script([Outcome("oversize", 413)])
    await retrier().run(send, {"m": ["a", "b"]}, same, shrink=lambda p: {"m": ["a"]})
    assert send.sent[-1] == {"m": ["a"]}
    send = Script([Outcome("oversize", 413)])
    await retrier().run(send, "héllo", same, shrink=lambda p: "hello")  # 6 bytes > 5
    assert send.sent == ["héllo", "hello"]


@settings(max_examples=200, deadline=None)
@given(
    st.lists(
        st.sampled_from(["oversize", "throttled", "transport", "server", "malformed"]),
        max_size=30,
    ),
    st.lists(st.sampled_from(["same", "smaller", "larger", "none"]), min_size=1, max_size=5),
)
async def test_an_identical_oversized_payload_is_never_resent(
    causes: list[str], rewrites: list[str]
) -> None:
    send = Script([Outcome(c, 413 if c == "oversize" else None) for c in causes])
    turn = iter(rewrites * 40)

    def shrink(payload: bytes) -> bytes | None:
        kind = next(turn)
        return {"same": payload, "smaller": payload[:-1], "larger": payload + b"!", "none": None}[
            kind
        ]

    with contextlib.suppress(PayloadTooLarge, RetriesExhausted):
        await Retrier(RetryPolicy(jitter=0.0), FakeClock()).run(
            send, b"x" * 50, same, shrink=shrink
        )
    results = causes[: len(send.sent)]
    for i, cause in enumerate(results[: len(send.sent) - 1]):
        if cause == "oversize":
            assert len(send.sent[i + 1]) < len(send.sent[i])
        else:
            assert send.sent[i + 1] == send.sent[i]
    assert sum(c == "oversize" for c in results[: len(send.sent) - 1]) <= 1


# -- statuses and retry-after ---------------------------------------------------------


@pytest.mark.parametrize(
    "status, body, cause",
    [
        (200, None, "ok"),
        (204, None, "ok"),
        (429, None, "throttled"),
        (529, b'{"type":"error","error":{"type":"overloaded_error"}}', "throttled"),
        (503, None, "server"),
        (500, b"<html>oops</html>", "server"),
        (408, None, "transport"),
        (409, None, "transport"),
        (413, None, "oversize"),
        (400, None, "refused"),
        (401, b'{"error":{"message":"bad key"}}', "refused"),
        (404, None, "refused"),
        (302, None, "refused"),
        (400, b'{"error":{"code":"rate_limit_exceeded","type":"requests"}}', "throttled"),
        (403, {"error": {"type": "rate_limit_error"}}, "throttled"),
        (503, {"error": "Service overloaded"}, "throttled"),
        (429, b'{"error":{"type":"insufficient_quota","code":"insufficient_quota"}}', "refused"),
        (429, "not json", "throttled"),
    ],
)
def test_classify_status(status: int, body: Any, cause: str) -> None:
    assert classify_status(status, body) == cause


@pytest.mark.parametrize(
    "value, seconds",
    [
        ("120", 120.0),
        ("1.5", 1.5),
        (" 0 ", 0.0),
        ("6m0s", 360.0),
        ("1h2m3.5s", 3723.5),
        ("20ms", 0.02),
        ("1.2s", 1.2),
        ("Wed, 21 Oct 2015 07:28:30 GMT", 30.0),
        ("Wed, 21 Oct 2015 07:27:00 GMT", 0.0),  # in the past
        (None, None),
        ("", None),
        ("soon", None),
        ("-5", None),
        ("nan", None),
        ("inf", None),
        ("Wed, 21 Oct 2015 07:28:30", None),  # no zone
    ],
)
def test_parse_retry_after(value: str | None, seconds: float | None) -> None:
    now = 1445412480.0  # Wed, 21 Oct 2015 07:28:00 GMT
    result = parse_retry_after(value, now)
    assert result == (None if seconds is None else pytest.approx(seconds))


@given(st.text(max_size=40))
def test_parse_retry_after_never_raises_and_never_goes_negative(value: str) -> None:
    result = parse_retry_after(value, 0.0)
    assert result is None or result >= 0


@pytest.mark.parametrize(
    "headers, seconds",
    [
        ({"Retry-After": "3"}, 3.0),
        ({"retry-after-ms": "1500", "retry-after": "9"}, 1.5),
        ({"x-ratelimit-remaining-tokens": "0", "x-ratelimit-reset-tokens": "1m2s"}, 62.0),
        (
            {
                "x-ratelimit-remaining-requests": "0",
                "x-ratelimit-reset-requests": "2s",
                "x-ratelimit-remaining-tokens": "0",
                "x-ratelimit-reset-tokens": "5s",
            },
            5.0,
        ),
        ({"x-ratelimit-remaining-tokens": "10", "x-ratelimit-reset-tokens": "1m"}, None),
        ({"retry-after": "garbage"}, None),
        ({}, None),
        (None, None),
    ],
)
def test_retry_after_from_headers(headers: dict[str, str] | None, seconds: float | None) -> None:
    assert retry_after_from(headers) == seconds
