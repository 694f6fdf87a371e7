"""Compose a grade from a template's rewards and metrics (HUD's `EvaluationResult` shape).

`score` is the weighted mean of the reward subscores; metrics land in `info.metrics`
and weigh nothing; a reward or metric that raises (or returns something that is not a
number) is recorded in `info.errors` and marks the grade `isError`, never a crash.
"""

from __future__ import annotations

import asyncio
import logging
from typing import Any

from ._rewards import Context, Plan, Scorer, finite

__all__ = ["compose", "with_metrics"]

log = logging.getLogger("proctor.env")


async def compose(
    task_id: str, plan: Plan, ctx: Context, second: dict[str, Any] | None
) -> dict[str, Any]:
    """The grade of a template with rewards; `second` is its normalized second yield, if any.

    That second value becomes one more subscore named after the template (weight 1.0);
    its `info`, `content` and `done` are kept.
    """
    errors: dict[str, str] = {}
    subscores = [await _reward(task_id, s, ctx, errors) for s in plan.rewards]
    kept: dict[str, Any] = {}
    if second is not None:
        subscores.append({"name": task_id, "value": second["score"], "weight": 1.0})
        kept = {k: second[k] for k in ("content", "done") if k in second}
    total = sum(s["weight"] for s in subscores)
    score = sum(s["value"] * s["weight"] for s in subscores) / total if total else 0.0
    info = dict((second or {}).get("info") or {})
    grade = {"score": score, "subscores": subscores, "info": info, **kept}
    return await with_metrics(task_id, plan, ctx, grade, errors)


async def with_metrics(
    task_id: str,
    plan: Plan,
    ctx: Context,
    grade: dict[str, Any],
    errors: dict[str, str] | None = None,
) -> dict[str, Any]:
    """`grade` with its metrics in `info.metrics`, errors in `info.errors` and `isError`."""
    errors = {} if errors is None else errors
    metrics: dict[str, float] = {}
    for s in plan.metrics:
        try:
            metrics[s.name] = finite(await ctx.call(s))
        except asyncio.CancelledError:
            raise
        except Exception as exc:
            errors[s.name] = _failed(task_id, "metric", s, exc)
    if not plan.metrics and not errors:
        return grade
    info = dict(grade.get("info") or {})
    if plan.metrics:
        info["metrics"] = metrics
    if errors:
        info["errors"] = errors
    out = {**grade, "info": info}
    if errors:
        out["isError"] = True
    return out


async def _reward(task_id: str, s: Scorer, ctx: Context, errors: dict[str, str]) -> dict[str, Any]:
    sub: dict[str, Any] = {"name": s.name, "value": 0.0, "weight": s.weight}
    try:
        value = finite(await ctx.call(s))
        if not 0.0 <= value <= 1.0:
            raise ValueError(f"returned {value!r}, outside [0, 1]")
        sub["value"] = value
    except asyncio.CancelledError:
        raise
    except Exception as exc:
        text = _failed(task_id, "reward", s, exc)
        sub["info"] = {"error": text}
        errors[s.name] = text
    return sub


def _failed(task_id: str, kind: str, s: Scorer, exc: Exception) -> str:
    text = f"{type(exc).__name__}: {exc}"
    log.warning("%s: %s %s failed: %s", task_id, kind, s.name, text)
    return text
