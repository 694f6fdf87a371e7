"""`run_main`: the signals a batch received are its own, never an earlier batch's."""

from __future__ import annotations

import asyncio
import os
import signal

from proctor.batch._batch_result import BatchResult, received_signal, run_main


async def _signalled() -> BatchResult:
    os.kill(os.getpid(), signal.SIGTERM)  # the handler cancels this task
    await asyncio.sleep(30)
    raise AssertionError("not interrupted")


async def _quiet() -> BatchResult:
    return BatchResult(launched=False, output_dir=None, signal=received_signal())


def test_a_signal_belongs_to_the_run_that_received_it() -> None:
    first = run_main(_signalled())
    assert first.stopped == "interrupted" and first.signal == "SIGTERM"
    # The next batch in this process received none (a module list kept the first's).
    assert run_main(_quiet()).signal is None
    assert received_signal() is None  # outside any run_main
