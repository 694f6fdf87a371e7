"""`BatchResult`, what a batch run did, and `run_main`, which runs one as the program
(`blocking` makes a synchronous call of a batch coroutine function with it)."""

from __future__ import annotations

import asyncio
import contextlib
import contextvars
import functools
import signal
from collections.abc import Callable, Coroutine
from typing import Any, ParamSpec

import orjson
from pydantic import BaseModel, ConfigDict

from .._loop import run_async
from ._plan import Plan

__all__ = ["BatchResult", "Interrupts", "blocking", "received_signal", "run_main"]

ENDED_OK = "completed"
P = ParamSpec("P")


class Interrupts:
    """The signals one `run_main` received, latest last: its own, never another run's."""

    def __init__(self) -> None:
        self.signals: list[str] = []

    @property
    def last(self) -> str | None:
        return self.signals[-1] if self.signals else None


_INTERRUPTS: contextvars.ContextVar[Interrupts] = contextvars.ContextVar("interrupts")


def received_signal() -> str | None:
    """The last signal the `run_main` this task runs under received (None: none, or
    not under `run_main`, e.g. `aexecute` awaited directly)."""
    interrupts = _INTERRUPTS.get(None)
    return None if interrupts is None else interrupts.last


class BatchResult(BaseModel):
    """What a batch run did: printed as JSON by `proctor batch --execute`/`--resume`."""

    model_config = ConfigDict(extra="forbid")

    format: str = "proctor.batch.result/1"
    launched: bool
    """False when the plan refused (then `plan` says why) or nothing was left to run."""
    output_dir: str | None
    batch_id: str | None = None
    counts: dict[str, int] = {}
    """Every rollout of the batch by status (`queued` ones were never launched)."""
    ran: int = 0
    """Rollouts that ended in this run."""
    evaluation_failed: int = 0
    """Rollouts whose grading failed (never a reward of 0)."""
    teardown_errors: int = 0
    stopped: str | None = None
    """`batch_cost_cap`, `interrupted` or `error` when the run stopped before the end."""
    error: str | None = None
    """What stopped the runner itself (`stopped == "error"`); what ran is recorded."""
    signal: str | None = None
    """The signal that interrupted the run (`SIGINT`, `SIGTERM`)."""
    wall_s: float = 0.0
    cost_usd: float | None = None
    plan: Plan | None = None

    @property
    def exit_code(self) -> int:
        """0 when every rollout completed (graded); 128 + the signal's number after an
        interrupt (130 for Ctrl-C, 143 for SIGTERM); else 1."""
        if self.stopped == "interrupted":
            return 143 if self.signal == "SIGTERM" else 130
        if self.error is not None or (not self.launched and self.plan is not None):
            return 1
        done = self.counts.get(ENDED_OK, 0)
        return 0 if done == sum(self.counts.values()) and not self.evaluation_failed else 1

    def to_json(self) -> str:
        """The result as one indented JSON document (the plan only when it refused)."""
        exclude = {"plan"} if self.launched or self.plan is None else set()
        doc = self.model_dump(mode="json", exclude=exclude)
        return orjson.dumps(doc, option=orjson.OPT_INDENT_2).decode()


def run_main(coro: Any) -> BatchResult:
    """Run a batch coroutine as the program's main task; SIGINT/SIGTERM cancel it, so
    in-flight rollouts are recorded interrupted and the store is closed cleanly."""

    async def main() -> BatchResult:
        task = asyncio.current_task()
        loop = asyncio.get_running_loop()
        assert task is not None
        interrupts = Interrupts()
        _INTERRUPTS.set(interrupts)  # this task's context: the runner's tasks inherit it

        def interrupt(sig: signal.Signals) -> None:
            interrupts.signals.append(sig.name)
            task.cancel()

        for sig in (signal.SIGINT, signal.SIGTERM):
            with contextlib.suppress(NotImplementedError, RuntimeError, ValueError):
                loop.add_signal_handler(sig, interrupt, sig)  # fails off the main thread
        try:
            result: BatchResult = await coro
        except asyncio.CancelledError:
            if interrupts.last is None:
                raise
            # a signal before the runner started (while planning): nothing launched
            result = BatchResult(
                launched=False, output_dir=None, stopped="interrupted", signal=interrupts.last
            )
        return result

    return run_async(main(), fast=True)


def blocking(afn: Callable[P, Coroutine[Any, Any, BatchResult]]) -> Callable[P, BatchResult]:
    """`afn` for synchronous callers, run by `run_main`: its parameters and docstring,
    its name without the leading `a` (`aexecute` -> `execute`)."""

    def run(*args: P.args, **kwargs: P.kwargs) -> BatchResult:
        return run_main(afn(*args, **kwargs))

    functools.update_wrapper(run, afn)
    run.__name__ = run.__qualname__ = afn.__name__.removeprefix("a")
    return run
