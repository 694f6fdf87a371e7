"""`run_async`: one way to run a coroutine as the program's main task (CLI and batch)."""

from __future__ import annotations

import asyncio
import threading

import pytest

from proctor._loop import run_async


@pytest.mark.parametrize("fast", [False, True])
def test_it_runs_off_the_main_thread_too(fast: bool) -> None:
    # A batch run from a thread (the dashboard's tests do): no signal handlers there,
    # and uvloop says so with a ValueError, asyncio with a RuntimeError.
    results: list[object] = []

    def run() -> None:
        try:
            results.append(run_async(asyncio.sleep(0, "done"), fast=fast))
        except BaseException as exc:
            results.append(exc)

    thread = threading.Thread(target=run)
    thread.start()
    thread.join(60)
    assert results == ["done"]
