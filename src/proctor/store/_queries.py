"""The aggregates a dashboard shows, as SQL over a batch's read-only index.

Each function reads the index of one output directory while runners write it (WAL:
the last commit), in a bounded result (grouped, bucketed or one page), never a whole
batch in memory. Errors are `_index.read`'s: no index, or a damaged one.
"""

from __future__ import annotations

import os
import sqlite3
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from . import _index
from ._query import RolloutQuery, select, where

__all__ = [
    "BatchTotals",
    "RolloutPage",
    "cell_means",
    "cost_by_model",
    "cost_curve",
    "distinct_values",
    "group_reward_histograms",
    "page_rollouts",
    "reward_histogram",
    "rollout_columns",
    "task_means",
    "totals",
]

Path = str | os.PathLike[str]
_ENDED_SQL = ", ".join(f"'{s}'" for s in sorted(_index.ENDED))
_GROUPS = frozenset({"agent", "model", "task"})


def _rows(path: Path, sql: str, args: Sequence[Any] = ()) -> list[tuple[Any, ...]]:
    return _index.read(path, lambda db: list(db.execute(sql, list(args))))


@dataclass(frozen=True, slots=True)
class BatchTotals:
    """Figures over every rollout of a batch (its current attempts)."""

    total: int
    ended: int
    """Rollouts in a `TERMINAL` status."""
    graded: int
    """Rollouts with a reward."""
    mean_reward: float | None
    cost: float | None
    """Recorded USD (None: no rollout recorded a cost)."""
    first_start: float | None
    last_end: float | None
    max_repeat: int
    """The highest repeat index (0 without repeats)."""


def totals(path: Path) -> BatchTotals:
    """Counts, mean reward, cost and time span of the batch at `path` (one SQL pass)."""
    ((total, ended, graded, mean, cost, first, last, repeat),) = _rows(
        path,
        "SELECT COUNT(*), "
        f"COUNT(CASE WHEN status IN ({_ENDED_SQL}) THEN 1 END), COUNT(reward), AVG(reward), "
        "SUM(cost), MIN(started_at), MAX(ended_at), IFNULL(MAX(repeat), 0) FROM rollouts",
    )
    return BatchTotals(total, ended, graded, mean, cost, first, last, repeat)


def cost_by_model(path: Path) -> dict[Any, float]:
    """Recorded USD per model (0.0 for a model with no recorded cost; None: no model)."""
    return dict(_rows(path, "SELECT model, TOTAL(cost) FROM rollouts GROUP BY 1"))


def distinct_values(path: Path, column: str) -> list[Any]:
    """The values of an index column over the batch, sorted, without None.

    Raises:
        ValueError: an unknown column.
    """
    if column not in _index.SORTABLE:
        raise ValueError(f"no column {column!r}; one of {sorted(_index.SORTABLE)}")
    sql = f"SELECT DISTINCT {column} FROM rollouts WHERE {column} IS NOT NULL ORDER BY 1"
    return [r[0] for r in _rows(path, sql)]


def cell_means(path: Path, limit: int) -> list[dict[str, Any]]:
    """`mean_reward`, `graded` and `total` per (`agent`, `model`, `task`), sorted by task
    then agent and model; the first `limit` cells."""
    rows = _rows(
        path,
        "SELECT agent, model, task, AVG(reward), COUNT(reward), COUNT(*) FROM rollouts "
        "GROUP BY agent, model, task ORDER BY task, agent, model LIMIT ?",
        (limit,),
    )
    keys = ("agent", "model", "task", "mean_reward", "graded", "total")
    return [dict(zip(keys, row, strict=True)) for row in rows]


def task_means(path: Path) -> dict[str, tuple[float | None, int, int]]:
    """Per task ('-' for none): mean reward, graded rollouts, rollouts."""
    rows = _rows(
        path,
        "SELECT IFNULL(task, '-'), AVG(reward), COUNT(reward), COUNT(*) FROM rollouts GROUP BY 1",
    )
    return {str(t): (mean, graded, total) for t, mean, graded, total in rows}


def _reward_range(path: Path) -> tuple[float, float] | None:
    """The histogram's range: [0, 1] for rewards inside it, else their min and max."""
    ((lo, hi),) = _rows(path, "SELECT MIN(reward), MAX(reward) FROM rollouts")
    if lo is None:
        return None
    return (min(lo, 0.0), max(hi, 1.0)) if 0.0 <= lo <= hi <= 1.0 else (float(lo), float(hi))


def _bin_sql(lo: float, hi: float, bins: int) -> tuple[str, list[Any]]:
    width = (hi - lo) / bins or 1.0
    return "MIN(CAST((reward - ?) / ? AS INTEGER), ?)", [lo, width, bins - 1]


def reward_histogram(path: Path, bins: int = 10) -> dict[str, Any]:
    """A histogram of rewards: `lo`, `hi` and `counts` (`bins` equal-width bins over
    [0, 1], or over the rewards' range when some fall outside it)."""
    span = _reward_range(path)
    if span is None:
        return {"lo": 0.0, "hi": 1.0, "counts": [0] * bins}
    expr, args = _bin_sql(*span, bins)
    rows = _rows(
        path, f"SELECT {expr}, COUNT(*) FROM rollouts WHERE reward IS NOT NULL GROUP BY 1", args
    )
    counts = [0] * bins
    for b, n in rows:
        counts[max(0, int(b))] += n
    return {"lo": span[0], "hi": span[1], "counts": counts}


def group_reward_histograms(path: Path, by: str, bins: int, limit: int) -> dict[str, Any]:
    """Reward histograms per `agent`, `model` or `task` ('-' for none; the first
    `limit` by name), on the batch's range: `lo`, `hi`, `groups` ({name: counts}) and
    `more` (groups not shown).

    Raises:
        ValueError: `by` is none of the three.
    """
    if by not in _GROUPS:
        raise ValueError(f"cannot group rewards by {by!r}")
    key = f"IFNULL({by}, '-')"
    ((distinct,),) = _rows(path, f"SELECT COUNT(DISTINCT {key}) FROM rollouts")
    sql = f"SELECT DISTINCT {key} FROM rollouts ORDER BY 1 LIMIT ?"
    names = [str(r[0]) for r in _rows(path, sql, [limit])]
    span = _reward_range(path) or (0.0, 1.0)
    groups = {name: [0] * bins for name in names}
    if names:
        expr, args = _bin_sql(*span, bins)
        marks = ", ".join("?" * len(names))
        rows = _rows(
            path,
            f"SELECT {key}, {expr}, COUNT(*) FROM rollouts "
            f"WHERE reward IS NOT NULL AND {key} IN ({marks}) GROUP BY 1, 2",
            [*args, *names],
        )
        for name, b, n in rows:
            groups[str(name)][max(0, int(b))] += n
    return {"lo": span[0], "hi": span[1], "groups": groups, "more": distinct - len(names)}


def cost_curve(path: Path, points: int) -> list[tuple[float, float]]:
    """Cumulative cost by `ended_at`, at most `points` (time, cost) pairs: rollouts are
    bucketed by end time, each bucket's point at its last end."""
    ((lo, hi),) = _rows(path, "SELECT MIN(ended_at), MAX(ended_at) FROM rollouts")
    if lo is None:
        return []
    width = (hi - lo) / points or 1.0
    rows = _rows(
        path,
        "SELECT t, SUM(c) OVER (ORDER BY k) FROM ("
        "SELECT MIN(CAST((ended_at - ?) / ? AS INTEGER), ?) AS k, MAX(ended_at) AS t, "
        "TOTAL(cost) AS c FROM rollouts WHERE ended_at IS NOT NULL GROUP BY k) ORDER BY k",
        [lo, width, points - 1],
    )
    return [(float(t), float(c)) for t, c in rows]


@dataclass(frozen=True, slots=True)
class RolloutPage:
    """One page of index rows and how many rows match in all."""

    total: int
    rows: list[dict[str, Any]]


def page_rollouts(path: Path, query: RolloutQuery) -> RolloutPage:
    """The page `query` asks for and the count of every matching row, read in one
    transaction (they agree while a runner writes)."""
    clause, args = where(query)
    sql, page_args = select(query)

    def read(db: sqlite3.Connection) -> RolloutPage:
        db.execute("BEGIN")
        try:
            (total,) = db.execute(f"SELECT COUNT(*) FROM rollouts{clause}", args).fetchone()
            rows = [dict(zip(_index.COLUMNS, r, strict=True)) for r in db.execute(sql, page_args)]
        finally:
            db.execute("COMMIT")
        return RolloutPage(total, rows)

    return _index.read(path, read)


def rollout_columns(
    path: Path, columns: Sequence[str], query: RolloutQuery
) -> list[tuple[Any, ...]]:
    """The named index columns of the rows `query` selects, in its order and page
    (for a summary that needs a few columns of many rows).

    Raises:
        ValueError: an unknown column.
    """
    return _rows(path, *select(query, columns))
