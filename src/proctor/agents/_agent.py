"""The agent contract and the simplest agents."""

from __future__ import annotations

import inspect
import time
from collections.abc import Awaitable, Callable, Iterable
from typing import TYPE_CHECKING, Any, Protocol, runtime_checkable

if TYPE_CHECKING:
    from ..agents._run import Run

__all__ = ["Agent", "FunctionAgent", "ScriptedAgent", "agent_from_fn"]


@runtime_checkable
class Agent(Protocol):
    """Anything with `async __call__(run)`: drive the run, record steps on `run.trace`,
    and leave the answer in `run.trace.content`."""

    async def __call__(self, run: Run) -> None:
        """Act on the run until there is an answer."""


class FunctionAgent:
    """Wrap `f(prompt) -> answer` (sync or async) as an agent; records one assistant step."""

    def __init__(self, fn: Callable[[Any], Awaitable[Any] | Any]) -> None:
        self.fn = fn

    def __repr__(self) -> str:
        return f"FunctionAgent({getattr(self.fn, '__qualname__', self.fn)})"

    async def __call__(self, run: Run) -> None:
        t0 = time.time()
        answer = self.fn(run.prompt)
        if inspect.isawaitable(answer):
            answer = await answer
        run.trace.content = answer
        run.trace.add("assistant", answer, start=t0)


def agent_from_fn(fn: Callable[[Any], Awaitable[Any] | Any]) -> FunctionAgent:
    """An agent that answers each prompt with `fn(prompt)`."""
    return FunctionAgent(fn)


class ScriptedAgent:
    """Answer from a fixed script: a mapping by task slug or id, or answers in turn."""

    def __init__(self, answers: dict[str, Any] | Iterable[Any]) -> None:
        self._by_key = answers if isinstance(answers, dict) else None
        self._queue = None if isinstance(answers, dict) else list(answers)

    async def __call__(self, run: Run) -> None:
        if self._by_key is not None:
            answer = self._by_key.get(run.slug, self._by_key.get(run.task.id))
        else:
            assert self._queue is not None
            answer = self._queue.pop(0) if self._queue else None
        run.trace.content = answer
        run.trace.add("assistant", answer)
