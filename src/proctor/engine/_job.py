"""`Job`: the receipt of a batch of rollouts."""

from __future__ import annotations

import math
import time
import uuid
from collections import Counter
from typing import Any

from ..agents import Run
from ..records import JobStats
from ._groups import groups
from ._summary import RunSummary

__all__ = ["Job"]


class Job:
    """The runs of one `Taskset.run` call (or several, when passed back in as `job=`).

    Every ended run leaves a `RunSummary` in `summaries`; `runs` holds the runs
    themselves only when they were kept (`Taskset.run(keep="runs")`, the default).
    The statistics (`stats`, `pass_at_k`, `summary_groups`) read the summaries, so
    they are the same either way.
    """

    def __init__(self, name: str = "", *, id: str | None = None, group: int = 1) -> None:
        self.id = id or uuid.uuid4().hex
        self.name = name
        self.group = group
        self.runs: list[Run] = []
        self.summaries: list[RunSummary] = []
        self.created_at = time.time()

    def __repr__(self) -> str:
        s = self.stats
        mean = "n/a" if s.mean_reward is None else f"{s.mean_reward:.3f}"
        return f"<Job {self.name or self.id[:8]}: {s.runs} runs, mean {mean}, {s.errors} errors>"

    def add(self, run: Run, *, keep: bool = True) -> RunSummary:
        """Count an ended run: its summary always, the run itself only with `keep`."""
        summary = RunSummary.of(run)
        self.summaries.append(summary)
        if keep:
            self.runs.append(run)
        return summary

    @property
    def stats(self) -> JobStats:
        """Mean reward over graded runs; failed runs counted apart, by phase."""
        rewards = [s.reward for s in self.summaries if s.reward is not None]
        phases = Counter(s.error_phase for s in self.summaries if s.error_phase is not None)
        return JobStats(
            runs=len(self.summaries),
            graded=len(rewards),
            errors=sum(phases.values()),
            mean_reward=sum(rewards) / len(rewards) if rewards else None,
            errors_by_phase=dict(phases),
        )

    def groups(self) -> dict[str, list[Run]]:
        """The runs by group id (the repeats of one row), in order.

        Raises:
            ValueError: the job did not keep every run (`summary_groups` has them all).
        """
        if len(self.runs) != len(self.summaries):
            raise ValueError(
                f"job {self.name or self.id[:8]} kept {len(self.runs)} of its "
                f"{len(self.summaries)} runs (keep='summaries'): use summary_groups()"
            )
        return groups(self.runs)

    def summary_groups(self) -> dict[str, list[RunSummary]]:
        """The run summaries by group id (the repeats of one row), in order."""
        out: dict[str, list[RunSummary]] = {}
        for s in self.summaries:
            out.setdefault(s.group_id, []).append(s)
        return out

    def pass_at_k(self, k: int, *, threshold: float = 1.0) -> float | None:
        """The unbiased pass@k, averaged over groups (None for an empty job).

        A run passes when its reward is at least `threshold` (a failed run does not);
        a group of `n` runs with `c` passing gives 1 - C(n - c, k) / C(n, k).

        Raises:
            ValueError: `k` below 1, or a group smaller than `k`.
        """
        if isinstance(k, bool) or not isinstance(k, int) or k < 1:
            raise ValueError(f"pass_at_k: k must be an int >= 1; got {k!r}")
        estimates = []
        for gid, members in self.summary_groups().items():
            n = len(members)
            if n < k:
                raise ValueError(f"pass@{k} needs groups of at least {k}; group {gid} has {n}")
            c = sum(1 for s in members if s.reward is not None and s.reward >= threshold)
            estimates.append(1.0 - math.comb(n - c, k) / math.comb(n, k))
        return sum(estimates) / len(estimates) if estimates else None

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
