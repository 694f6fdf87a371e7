"""Group rewards and advantages: computed once every rollout of a group has ended."""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import TYPE_CHECKING, Any

from ..env import Environment, GroupMember, evaluate_group, registered

if TYPE_CHECKING:
    from ..agents import Run
    from ..records import Task

__all__ = ["apply_group_rewards", "check_group_rewards", "groups"]


def groups(runs: Iterable[Run]) -> dict[str, list[Run]]:
    """The runs by `group_id`, in their order."""
    out: dict[str, list[Run]] = {}
    for run in runs:
        out.setdefault(run.group_id, []).append(run)
    return out


def check_group_rewards(rows: Iterable[Task], group: int) -> None:
    """Refuse a group smaller than 2 for rows whose environment has group rewards.

    Raises:
        ValueError: naming the first such environment.
    """
    if group >= 2:
        return
    for env in {row.env: registered(row.env) for row in rows}.values():
        if env is not None and env.group_rewards:
            names = ", ".join(r.name for r in env.group_rewards)
            raise ValueError(
                f"environment {env.name!r} has group rewards ({names}): they need group >= 2, "
                f"not {group}"
            )


async def apply_group_rewards(runs: Iterable[Run]) -> None:
    """Give each group of `runs` its environment's group rewards and advantages.

    Every run of a group gets `group_rewards[name]`; a group reward with a weight
    joins each graded run's grade as a subscore (the reward becomes the weighted mean
    again), and one that raised is that subscore's error (`info.errors`, value 0,
    evaluation failed). Then each graded run of a group of two or more gets
    `advantage`: its reward minus the mean reward of the group's graded runs.
    """
    for members in groups(runs).values():
        env = registered(members[0].task.env)
        if env is not None and env.group_rewards and len(members) >= 2:
            await _group_rewards(env, members)
        _advantages(members)


async def _group_rewards(env: Environment, runs: Sequence[Run]) -> None:
    values, errors = await evaluate_group(env, [_member(run) for run in runs])
    for name, column in values.items():
        for run, value in zip(runs, column, strict=True):
            run.group_rewards[name] = value
    weights = {reward.name: reward.weight for reward in env.group_rewards}
    for i, run in enumerate(runs):
        if run.grade is None or run.reward is None:
            continue
        added = [
            _subscore(name, values[name][i] if name in values else 0.0, weight, errors.get(name))
            for name, weight in weights.items()
            if weight > 0
        ]
        run.grade.add_subscores(added, name=run.task.id)
        if errors:
            run.grade.info.setdefault("errors", {}).update(errors)
        if any(weights.get(name, 0.0) > 0 for name in errors):
            run.grade.is_error = True


def _subscore(name: str, value: float, weight: float, error: str | None) -> dict[str, Any]:
    sub: dict[str, Any] = {"name": name, "value": value, "weight": weight}
    if error is not None:
        sub["info"] = {"error": error}
    return sub


def _advantages(runs: Sequence[Run]) -> None:
    rewards = [run.reward for run in runs if run.reward is not None]
    if len(runs) < 2 or not rewards:
        return
    mean = sum(rewards) / len(rewards)
    for run in runs:
        if run.reward is not None:
            run.advantage = run.reward - mean


def _member(run: Run) -> GroupMember:
    grade = run.grade if run.reward is not None else None
    return GroupMember(
        slug=run.slug,
        task=run.task,
        answer=run.answer,
        reward=run.reward,
        subscores=[] if grade is None else list(grade.subscores),
        metrics={} if grade is None else dict(grade.metrics),
        stop_reason=run.stop_reason,
        trace_id=run.trace_id,
        error=None if run.error is None else f"{run.error.type}: {run.error.message}",
    )
