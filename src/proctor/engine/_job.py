"""`Job`: the receipt of a batch of rollouts."""

from __future__ import annotations

import math
import time
import uuid
from collections import Counter
from typing import Any, Literal

from ..agents import Run
from ..records import JobStats
from ._groups import groups
from ._summary import RunSummary

__all__ = ["Job", "Keep"]

Keep = Literal["runs", "summaries", "none"]


class Job:
    """The runs of one `Taskset.run` call (or several, when passed back in as `job=`).

    What it keeps of each ended run is the run's `keep` (`Taskset.run(keep=...)`):
    `"runs"` (the default) the `Run` in `runs` and a `RunSummary` in `summaries`,
    `"summaries"` the summary only, `"none"` nothing. `stats` counts every run either
    way; `pass_at_k` and `summary_groups` need the summaries.
    """

    def __init__(self, name: str = "", *, id: str | None = None, group: int = 1) -> None:
        self.id = id or uuid.uuid4().hex
        self.name = name
        self.group = group
        self.runs: list[Run] = []
        self.summaries: list[RunSummary] = []
        self.created_at = time.time()
        self._count = 0
        self._graded = 0
        self._reward_sum = 0.0
        self._phases: Counter[str] = Counter()

    def __repr__(self) -> str:
        s = self.stats
        mean = "n/a" if s.mean_reward is None else f"{s.mean_reward:.3f}"
        return f"<Job {self.name or self.id[:8]}: {s.runs} runs, mean {mean}, {s.errors} errors>"

    def add(self, run: Run, *, keep: Keep = "runs") -> None:
        """Count an ended run into `stats`, keeping what `keep` says of it."""
        self.count(run)
        if keep != "none":
            self.summaries.append(RunSummary.of(run))
        if keep == "runs":
            self.runs.append(run)

    def count(self, run: Run) -> None:
        """Count an ended run into `stats` only (`add` keeps it too)."""
        self._count += 1
        reward = run.reward
        if reward is not None:
            self._graded += 1
            self._reward_sum += reward
        if run.error is not None:
            self._phases[run.error.phase] += 1

    @property
    def stats(self) -> JobStats:
        """Mean reward over graded runs; failed runs counted apart, by phase."""
        graded = self._graded
        return JobStats(
            runs=self._count,
            graded=graded,
            errors=sum(self._phases.values()),
            mean_reward=self._reward_sum / graded if graded else None,
            errors_by_phase=dict(self._phases),
        )

    def groups(self) -> dict[str, list[Run]]:
        """The runs by group id (the repeats of one row), in order.

        Raises:
            ValueError: the job did not keep every run (`summary_groups` has them all).
        """
        if len(self.runs) != self._count:
            raise ValueError(
                f"job {self.name or self.id[:8]} kept {len(self.runs)} of its "
                f"{self._count} runs (keep='summaries' or 'none'): see summary_groups()"
            )
        return groups(self.runs)

    def summary_groups(self) -> dict[str, list[RunSummary]]:
        """The run summaries by group id (the repeats of one row), in order.

        Raises:
            ValueError: the job did not keep a summary of every run (`keep="none"`).
        """
        if len(self.summaries) != self._count:
            raise ValueError(
                f"job {self.name or self.id[:8]} kept {len(self.summaries)} summaries of its "
                f"{self._count} runs (keep='none')"
            )
        out: dict[str, list[RunSummary]] = {}
        for s in self.summaries:
            out.setdefault(s.group_id, []).append(s)
        return out

    def pass_at_k(self, k: int, *, threshold: float = 1.0) -> float | None:
        """The unbiased pass@k, averaged over groups (None for an empty job).

        A run passes when its reward is at least `threshold` (a failed run does not);
        a group of `n` runs with `c` passing gives 1 - C(n - c, k) / C(n, k).

        Raises:
            ValueError: `k` below 1, a group smaller than `k`, or the job did not keep
                a summary of every run (`keep="none"`).
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
