"""`Held` unwinds like one AsyncExitStack: reverse order, every exit run, the last
failure raised with the earlier ones as its context."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from proctor.engine._held import Held


class _Cm:
    def __init__(self, name: str, log: list[str], fail: BaseException | None = None) -> None:
        self.name, self.log, self.fail = name, log, fail

    async def __aenter__(self) -> str:
        return self.name

    async def __aexit__(self, typ: Any, exc: Any, tb: Any) -> None:
        self.log.append(f"{self.name}:{type(exc).__name__ if exc is not None else '-'}")
        if self.fail is not None:
            raise self.fail


async def _held(log: list[str], **fails: BaseException) -> Held:
    held = Held()
    held.lease = _Cm("lease", log, fails.get("lease"))
    held.link = _Cm("link", log, fails.get("link"))
    await held.enter_async_context(_Cm("verifier", log, fails.get("verifier")))
    held.callback(lambda: log.append("session"))
    return held


async def test_exits_run_last_entered_first_and_once() -> None:
    log: list[str] = []
    held = await _held(log)
    await held.aclose()
    await held.aclose()
    assert log == ["session", "verifier:-", "link:-", "lease:-"]


async def test_every_exit_runs_after_failures_and_the_last_failure_wins() -> None:
    log: list[str] = []
    first, second = RuntimeError("verifier"), ValueError("link")
    held = await _held(log, verifier=first, link=second)
    with pytest.raises(ValueError) as info:
        await held.aclose()
    assert log == ["session", "verifier:-", "link:RuntimeError", "lease:ValueError"]
    assert info.value.__context__ is first


async def test_a_cancellation_in_an_exit_still_releases_the_lease() -> None:
    log: list[str] = []
    held = Held()
    held.lease = _Cm("lease", log)
    held.link = _Cm("link", log, asyncio.CancelledError())
    with pytest.raises(asyncio.CancelledError):
        await held.aclose()
    assert log == ["link:-", "lease:CancelledError"]
