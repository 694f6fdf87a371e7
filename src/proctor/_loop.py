"""`run_async`: a coroutine run as the program's main task, on a fresh event loop;
`outlast_cancel`: an await a cancel cannot cut short."""

from __future__ import annotations

import asyncio
import os
import signal
from collections.abc import Coroutine
from typing import Any, TypeVar

from ._errors import Terminated

__all__ = ["outlast_cancel", "run_async"]

T = TypeVar("T")


def run_async(coro: Coroutine[Any, Any, T], *, fast: bool = False) -> T:
    """Run `coro` on a fresh event loop; `fast` picks uvloop when it is installed.

    `asyncio.Runner(loop_factory=...)` is the 3.11 way to choose a loop without the
    event-loop-policy API (deprecated from 3.12 on). Ctrl-C cancels `coro` and raises
    `KeyboardInterrupt` (the Runner's doing); SIGTERM cancels it the same way and
    raises `Terminated`, so child processes and environments are stopped either way.
    A coroutine that adds its own SIGINT or SIGTERM handler (the batch runner, which
    records the rollouts it interrupts) takes that signal over.

    Raises:
        Terminated: SIGTERM cancelled the work.
    """
    factory = None
    if fast and not os.environ.get("PROCTOR_NO_UVLOOP"):
        try:
            import uvloop
        except ImportError:
            pass
        else:
            factory = uvloop.new_event_loop
    terminated = False

    async def guarded() -> T:
        nonlocal terminated
        task = asyncio.current_task()
        assert task is not None
        loop = asyncio.get_running_loop()

        def on_sigterm() -> None:
            nonlocal terminated
            terminated = True
            task.cancel()

        try:
            loop.add_signal_handler(signal.SIGTERM, on_sigterm)
        except (NotImplementedError, RuntimeError, ValueError):  # no signals off the main thread
            return await coro
        try:
            return await coro
        finally:
            loop.remove_signal_handler(signal.SIGTERM)

    with asyncio.Runner(loop_factory=factory) as runner:
        try:
            return runner.run(guarded())
        except asyncio.CancelledError:
            if terminated:
                raise Terminated("terminated") from None
            raise


async def outlast_cancel(done: asyncio.Future[Any]) -> None:
    """Wait for `done` even when cancelled meanwhile, then re-raise the cancel.

    For a killed child's exit: a cancelled wait would leave its transport open and its
    Popen unreaped, and the loop may close before anyone reaps it.
    """
    cancelled = False
    while not done.done():
        try:
            await asyncio.shield(done)
        except asyncio.CancelledError:
            cancelled = True
    if cancelled:
        raise asyncio.CancelledError
