"""`TaskRunner`: drives one template generator from its first yield to its second."""

from __future__ import annotations

import contextlib
import logging
import math
from collections.abc import AsyncGenerator
from typing import Any

from .._errors import TaskError
from ..records._records import Grade
from ._template import Template

__all__ = ["TaskRunner"]

log = logging.getLogger("proctor.env")


class TaskRunner:
    """One suspended task: `start` runs to the prompt, `grade` to the score.

    Single use: grade or cancel consumes the generator and runs its teardown.
    """

    __slots__ = ("_gen", "_kwargs", "template")

    def __init__(self, template: Template, args: dict[str, Any]) -> None:
        """Bind args now, so bad args fail before any task code runs.

        Raises:
            TaskError: unknown, missing or ill-typed args.
        """
        self.template = template
        self._kwargs = template.bind(args)
        self._gen: AsyncGenerator[Any, Any] | None = None

    @property
    def task_id(self) -> str:
        """The template id this runner drives."""
        return self.template.id

    async def start(self) -> dict[str, Any]:
        """Run to the first yield and return the prompt frame.

        Raises:
            TaskError: the task raised, ended early, or yielded no prompt.
        """
        try:
            self._gen = self.template.fn(**self._kwargs)
            first = await self._gen.__anext__()
        except StopAsyncIteration:
            raise TaskError(f"{self.task_id}: ended before yielding a prompt") from None
        except Exception as exc:
            raise TaskError(f"{self.task_id}: {type(exc).__name__}: {exc}") from exc
        if isinstance(first, str | list):
            return {"prompt": first}
        if isinstance(first, dict) and "prompt" in first and _bindings_ok(first.get("bindings")):
            return first
        await self.cancel()
        if isinstance(first, dict) and "prompt" in first:
            raise TaskError(
                f"{self.task_id}: per-episode 'bindings' must map capability name -> object; "
                f"got {first['bindings']!r:.200}"
            )
        raise TaskError(
            f"{self.task_id}: first yield must be a str, a list of messages or "
            f"a dict with 'prompt'; got {type(first).__name__}"
        )

    async def grade(self, payload: dict[str, Any]) -> dict[str, Any]:
        """Send the answer in and return the normalized second yield.

        Raises:
            TaskError: the task raised or its score is not a finite number.
        """
        gen = self._gen
        if gen is None:
            raise TaskError(f"{self.task_id}: grade before start")
        self._gen = None
        try:
            second = await gen.asend(self.template.parse_answer(payload.get("answer")))
        except StopAsyncIteration:
            return _warned(
                {"score": 0.0}, self.task_id, "the template ended without a second yield; scored 0"
            )
        except Exception as exc:
            await _close(gen, self.task_id)  # e.g. parse_answer raised: teardown still runs
            raise TaskError(f"{self.task_id}: {type(exc).__name__}: {exc}") from exc
        try:
            return self._normalize(second)
        finally:
            await _close(gen, self.task_id)

    async def cancel(self) -> None:
        """Close the generator (its `finally` blocks run); safe to call twice."""
        gen, self._gen = self._gen, None
        if gen is not None:
            await _close(gen, self.task_id)

    def _normalize(self, value: Any) -> dict[str, Any]:
        if isinstance(value, bool | int | float):
            return {"score": self._finite(value)}
        if isinstance(value, Grade):
            wire = value.to_wire()
            wire["score"] = self._finite(wire["score"])
            return wire
        if isinstance(value, dict) and "score" in value:
            out = dict(value)
            out["score"] = self._finite(value["score"])
            extra = sorted(set(out) - _GRADE_KEYS)
            if extra:  # passed through (HUD clients read them); a proctor client warns
                log.warning(
                    "%s: reward dict has keys proctor does not read: %s", self.task_id, extra
                )
            return out
        raise TaskError(
            f"{self.task_id}: second yield must be a number, a Grade "
            f"or a dict with a numeric 'score'; got {type(value).__name__}"
        )

    def _finite(self, score: Any) -> float:
        if isinstance(score, bool | int | float):
            with contextlib.suppress(OverflowError):  # an int past float range
                f = float(score)
                if math.isfinite(f):
                    return f
        raise TaskError(f"{self.task_id}: score must be a finite number; got {score!r:.80}")


_GRADE_KEYS = frozenset({"score", "subscores", "info", "content", "done", "isError"})


def _warned(result: dict[str, Any], task_id: str, warning: str) -> dict[str, Any]:
    """`result` with `warning` in `info.proctor_warnings` (the run's record keeps it), logged."""
    log.warning("%s: %s", task_id, warning)
    info = dict(result.get("info") or {})
    info["proctor_warnings"] = [*info.get("proctor_warnings", ()), warning]
    return {**result, "info": info}


def _bindings_ok(bindings: Any) -> bool:
    """Per-episode bindings are data for declared capabilities: `{name: {...}}` (as HUD)."""
    return bindings is None or (
        isinstance(bindings, dict) and all(isinstance(v, dict) for v in bindings.values())
    )


async def _close(gen: AsyncGenerator[Any, Any], task_id: str) -> None:
    try:
        await gen.aclose()
    except Exception as exc:
        raise TaskError(f"{task_id}: teardown failed: {type(exc).__name__}: {exc}") from exc
