"""`Job`: the receipt of a batch of rollouts."""

from __future__ import annotations

import time
import uuid
from collections import Counter
from typing import Any

from ..agents import Run
from ..records import JobStats
from ._groups import groups

__all__ = ["Job"]


class Job:
    """The runs of one `Taskset.run` call (or several, when passed back in as `job=`)."""

    def __init__(self, name: str = "", *, id: str | None = None, group: int = 1) -> None:
        self.id = id or uuid.uuid4().hex
        self.name = name
        self.group = group
        self.runs: list[Run] = []
        self.created_at = time.time()

    def __repr__(self) -> str:
        s = self.stats
        mean = "n/a" if s.mean_reward is None else f"{s.mean_reward:.3f}"
        return f"<Job {self.name or self.id[:8]}: {s.runs} runs, mean {mean}, {s.errors} errors>"

    @property
    def stats(self) -> JobStats:
        """Mean reward over graded runs; failed runs counted apart, by phase."""
        rewards = [r.reward for r in self.runs if r.reward is not None]
        phases = Counter(r.error.phase for r in self.runs if r.error is not None)
        return JobStats(
            runs=len(self.runs),
            graded=len(rewards),
            errors=sum(phases.values()),
            mean_reward=sum(rewards) / len(rewards) if rewards else None,
            errors_by_phase=dict(phases),
        )

    def groups(self) -> dict[str, list[Run]]:
        """The runs by group id (the repeats of one row), in order."""
        return groups(self.runs)

    @property
    def mean_reward(self) -> float | None:
        """Mean reward over graded runs (None when nothing was graded)."""
        return self.stats.mean_reward

    def to_dict(self) -> dict[str, Any]:
        """Summary row (without the runs themselves)."""
        s = self.stats
        return {
            "id": self.id,
            "name": self.name,
            "group": self.group,
            "created_at": self.created_at,
            "runs": s.runs,
            "graded": s.graded,
            "errors": s.errors,
            "mean_reward": s.mean_reward,
            "errors_by_phase": s.errors_by_phase,
        }
