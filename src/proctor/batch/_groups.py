"""Group rewards of recorded rollouts: once every rollout of a group has ended, the
environment's group rewards and each member's advantage, amended into the records."""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from ..agents import Run
    from ..store import BatchStore, PlannedRollout

__all__ = ["Earlier", "GroupRewards", "Member", "group_sizes", "run_from_record"]

Member = tuple["PlannedRollout", "Run"]
Earlier = Callable[[str], list[Member]]
"""The members of a group that ended before this runner (a resumed batch)."""


@dataclass(slots=True)
class GroupRewards:
    """Holds each group's ended runs until the group is whole (`sizes`: how many of
    its members end here), then applies `engine.apply_group_rewards` to the whole
    group (with `earlier` members read back from their records) and amends every
    member's record. Groups of one are passed through untouched.
    """

    store: BatchStore | None
    sizes: Mapping[str, int]
    earlier: Earlier | None = None
    _left: Counter[str] = field(default_factory=Counter)
    _held: dict[str, list[Member]] = field(default_factory=dict)

    def __post_init__(self) -> None:
        self._left.update(self.sizes)

    async def ended(self, key: str, a: PlannedRollout, run: Run) -> list[Member]:
        """Hold `run`; returns its whole group once the group has ended, else []."""
        held = self._held.setdefault(key, [])
        held.append((a, run))
        self._left[key] -= 1
        if self._left[key] > 0:
            return []
        del self._held[key], self._left[key]
        members = [*(self.earlier(key) if self.earlier else ()), *held]
        if len(members) >= 2:
            await self._apply(members)
        return held

    def unfinished(self) -> list[Member]:
        """The members held for groups that never ended (an interrupted run), once:
        they are given up, so a caller can still write them out."""
        held = [member for members in self._held.values() for member in members]
        self._held.clear()
        return held

    async def _apply(self, members: list[Member]) -> None:
        from ..engine import apply_group_rewards

        await apply_group_rewards(run for _, run in members)
        if self.store is None:
            return
        for a, run in members:
            fields = _amended(run)
            if fields:
                self.store.amend(a, **fields)


def _amended(run: Run) -> dict[str, Any]:
    """What a group adds to a member's record (nothing for a run it left alone)."""
    fields: dict[str, Any] = {}
    if run.advantage is not None:
        fields["advantage"] = run.advantage
    if run.group_rewards:
        fields["group_rewards"] = dict(run.group_rewards)
        grade = run.grade
        if grade is not None:
            fields["reward"] = run.reward
            fields["result"] = {
                "grade": grade.to_dict(),
                "evaluation": "failed" if grade.is_error else "ok",
            }
    return fields


def run_from_record(task: Any, group_id: str, record: Mapping[str, Any]) -> Run:
    """A finished `Run` rebuilt from its record, as much as group rewards read of it."""
    from ..agents import Run
    from ..records import Grade, RunError

    run = Run(task, group_id=group_id, trace_id=str(record.get("id", "")))
    run.status = "completed" if record.get("status") == "completed" else "failed"
    run.answer = record.get("answer")
    run.stop_reason = record.get("stop_reason")
    grade = (record.get("result") or {}).get("grade")
    if isinstance(grade, dict):
        run.grade = Grade(**grade)
    error = record.get("error")
    if isinstance(error, dict):
        run.error = RunError(
            str(error.get("phase")), str(error.get("type")), str(error.get("message"))
        )
    return run


def group_sizes(keys: Iterable[str]) -> dict[str, int]:
    """How many members of each group end in this runner."""
    return dict(Counter(keys))
