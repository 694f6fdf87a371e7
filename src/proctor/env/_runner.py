"""`TaskRunner`: drives one template from its setup hooks and first yield to its grade."""

from __future__ import annotations

import asyncio
import logging
import math
from collections.abc import AsyncGenerator
from typing import TYPE_CHECKING, Any

from .._errors import TaskError
from ..records import Grade
from ._compose import compose, with_metrics
from ._rewards import CURRENT_EPISODE, Context, Scorer
from ._template import Template

if TYPE_CHECKING:  # loaded only for a template that tracks a workspace (a cold child's start)
    from ._workspace import Snapshot
    from ._workspace_diff import WorkspaceDiff

__all__ = ["TaskRunner"]

log = logging.getLogger("proctor.env")


class TaskRunner:
    """One suspended task: `start` runs to the prompt, `grade` to the score.

    `solve` runs the template's reference solution in between.

    Single use: grade or cancel consumes the generator and runs its teardown.
    """

    __slots__ = ("_before", "_ctx", "_gen", "_kwargs", "_plan", "template")

    def __init__(self, template: Template, args: dict[str, Any], *, user: Any = None) -> None:
        """Bind args now, so bad args fail before any task code runs. `user` is the
        `tasks.start` param naming the run's user model (see `ModelUser`).

        Raises:
            TaskError: unknown, missing or ill-typed args.
        """
        self.template = template
        self._kwargs = template.bind(args)
        self._gen: AsyncGenerator[Any, Any] | None = None
        self._plan = template.plan()
        self._before: tuple[str, Snapshot] | None = None
        kwargs = self._kwargs  # not `self`: the closure would make a reference cycle
        self._ctx = Context(lambda: template.task_view(kwargs), self._plan.objects)
        self._ctx.episode.user_model = user

    @property
    def task_id(self) -> str:
        """The template id this runner drives."""
        return self.template.id

    def renew_user(self, user: Any) -> None:
        """Point the run's simulated users at a new user-model endpoint (`tasks.user`:
        the session of a driver that resumed this task)."""
        self._ctx.episode.user_model = user

    async def start(self) -> dict[str, Any]:
        """Run the setup hooks, then the template to its first yield; return the prompt frame.

        The frame carries `needs` when the task's functions want the trace or a judge.

        Raises:
            TaskError: a setup hook failed (`phase="setup"`), the task raised, ended
                early, or yielded no prompt.
        """
        plan = self._plan
        episode = CURRENT_EPISODE.set(self._ctx.episode)  # its users and dialogues
        try:
            if plan.setups:
                await self._hooks(plan.setups, "setup")
            try:
                self._gen = self.template.fn(**self._kwargs)
                first = await self._gen.__anext__()
            except StopAsyncIteration:
                raise TaskError(f"{self.task_id}: ended before yielding a prompt") from None
            except Exception as exc:
                raise TaskError(f"{self.task_id}: {type(exc).__name__}: {exc}") from exc
            if isinstance(first, _PROMPT):
                frame: dict[str, Any] = {"prompt": first}
            else:
                frame = await self._frame(first)
        finally:
            CURRENT_EPISODE.reset(episode)
        self._ctx.values["prompt"] = frame["prompt"]
        if plan.workspace is not None:
            root = plan.workspace.resolve()
            self._before = (root, await asyncio.to_thread(plan.workspace.snapshot, root))
        return {**frame, "needs": list(plan.needs)} if plan.needs else frame

    async def _frame(self, first: Any) -> dict[str, Any]:
        """The prompt frame of a first yield that is no bare prompt; the generator is
        closed if it is not one."""
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
        """Run the finalize hooks, send the answer in and return the grade.

        Without rewards the grade is the normalized second yield; with rewards it is
        composed from them (`_compose`). Metrics are added either way. With a tracked
        workspace its diff (snapshotted first, before the finalize hooks) is the
        grade's `workspace` key.

        Raises:
            TaskError: a finalize hook failed (`phase="finalize"`), the task raised or
                its score is not a finite number.
        """
        gen = self._gen
        if gen is None:
            raise TaskError(f"{self.task_id}: grade before start")
        self._gen = None
        try:
            workspace = None if self._plan.workspace is None else await self._workspace()
            second = await self._send(gen, payload)
        except Exception as exc:
            await _close(gen, self.task_id)  # e.g. parse_answer raised: teardown still runs
            if isinstance(exc, TaskError) and exc.phase is not None:
                raise
            raise TaskError(f"{self.task_id}: {type(exc).__name__}: {exc}") from exc
        try:
            plan = self._plan
            if second is _ENDED or plan.rewards or plan.metrics:
                result = await self._score(second)
            else:  # a bare second yield: nothing to await
                result = self._normalize(second)
        finally:
            await _close(gen, self.template.id)
        return result if workspace is None else {**result, "workspace": workspace.to_wire()}

    async def _workspace(self) -> WorkspaceDiff | None:
        """The tracked workspace's diff since `start` (injected as `workspace`), or None."""
        spec, before = self._plan.workspace, self._before
        if spec is None or before is None:
            return None
        root, first = before
        after = await asyncio.to_thread(spec.snapshot, root, first)
        from ._workspace_diff import diff

        self._ctx.values["workspace"] = found = diff(spec, root, first, after)
        return found

    async def solve(self) -> Any:
        """Run the template's reference solution in this substrate and return its answer.

        Raises:
            TaskError: not started, no solution declared, or the solution raised.
        """
        solution = self._plan.solution
        if self._gen is None:
            raise TaskError(f"{self.task_id}: solve before start")
        if solution is None:
            raise TaskError(f"{self.task_id}: declares no solution")
        try:
            return await self._ctx.call(solution)
        except Exception as exc:
            raise TaskError(f"{self.task_id}: solution: {type(exc).__name__}: {exc}") from exc

    async def _send(self, gen: AsyncGenerator[Any, Any], payload: dict[str, Any]) -> Any:
        """Finalize, then send the answer in: the second yield, or `_ENDED`."""
        answer = self.template.parse_answer(payload.get("answer"))
        self._ctx.graded(answer, payload)
        if self._plan.finalizers:
            await self._hooks(self._plan.finalizers, "finalize")
        try:
            return await gen.asend(answer)
        except StopAsyncIteration:
            return _ENDED

    async def _score(self, second: Any) -> dict[str, Any]:
        plan, task_id = self._plan, self.template.id
        if second is _ENDED:
            if plan.rewards:
                return await compose(task_id, plan, self._ctx, None)
            base = _warned(
                {"score": 0.0}, task_id, "the template ended without a second yield; scored 0"
            )
        else:
            base = self._normalize(second)
            if plan.rewards:
                return await compose(task_id, plan, self._ctx, base)
        return await with_metrics(task_id, plan, self._ctx, base) if plan.metrics else base

    async def _hooks(self, hooks: tuple[Scorer, ...], phase: str) -> None:
        """Run lifecycle hooks in order, each within its own timeout."""
        for hook in hooks:
            timer = asyncio.timeout(hook.timeout)
            try:
                async with timer:
                    await self._ctx.call(hook)
            except Exception as exc:
                if timer.expired():
                    message = f"{self.task_id}: {phase} timed out after {hook.timeout:g}s"
                else:
                    message = f"{self.task_id}: {phase} {hook.name}: {type(exc).__name__}: {exc}"
                raise TaskError(message, phase=phase) from exc

    async def cancel(self) -> None:
        """Close the generator (its `finally` blocks run); safe to call twice."""
        gen, self._gen = self._gen, None
        if gen is not None:
            await _close(gen, self.task_id)

    def _normalize(self, value: Any) -> dict[str, Any]:
        if isinstance(value, _NUMBER):
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
        if isinstance(score, _NUMBER):
            try:
                f = float(score)
            except OverflowError:  # an int past float range
                pass
            else:
                if math.isfinite(f):
                    return f
        raise TaskError(f"{self.task_id}: score must be a finite number; got {score!r:.80}")


_ENDED: Any = object()  # the template ended without a second yield
_NUMBER = (bool, int, float)  # a tuple: `bool | int | float` builds a union on every call
_PROMPT = (str, list)  # a first yield that is the prompt itself

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
