"""`RunSummary`: what a `Job` keeps of a run it does not keep whole."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from types import MappingProxyType
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from ..agents import Run

__all__ = ["RunSummary"]

_NO_USAGE: Mapping[str, int] = MappingProxyType({})


@dataclass(frozen=True, slots=True)
class RunSummary:
    """One ended run in a few hundred bytes: ids, outcome, timing, usage.

    Taken once the run's group has ended, so `reward` and `advantage` include its
    group rewards. Strings are the run's own (shared, not copied).
    """

    id: str
    """The run's trace id."""
    slug: str
    env: str
    task_id: str
    group_id: str
    status: str
    """`completed` or `failed` (a run cut short before it ended: `pending`/`running`)."""
    reward: float | None
    error_phase: str | None
    error_type: str | None
    evaluation_failed: bool
    stop_reason: str | None
    advantage: float | None
    started_at: float
    ended_at: float | None
    usage: Mapping[str, int]
    cost: float | None

    @classmethod
    def of(cls, run: Run) -> RunSummary:
        """The summary of `run` as it stands."""
        task, error, usage = run.task, run.error, run.usage
        return cls(
            run.trace.id,
            task.slug,
            task.env,
            task.id,
            run.group_id,
            run.status,
            run.reward,
            None if error is None else error.phase,
            None if error is None else error.type,
            run.evaluation_failed,
            run.stop_reason,
            run.advantage,
            run.started_at,
            run.ended_at,
            usage if usage else _NO_USAGE,
            run.cost,
        )

    @property
    def duration(self) -> float | None:
        """Seconds from start to end, once ended."""
        return None if self.ended_at is None else self.ended_at - self.started_at

    def to_dict(self) -> dict[str, Any]:
        """The summary as a JSON-ready dict."""
        return {
            "id": self.id,
            "slug": self.slug,
            "env": self.env,
            "task_id": self.task_id,
            "group_id": self.group_id,
            "status": self.status,
            "reward": self.reward,
            "error_phase": self.error_phase,
            "error_type": self.error_type,
            "evaluation_failed": self.evaluation_failed,
            "stop_reason": self.stop_reason,
            "advantage": self.advantage,
            "started_at": self.started_at,
            "ended_at": self.ended_at,
            "usage": dict(self.usage),
            "cost": self.cost,
        }
