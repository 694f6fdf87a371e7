"""What the dashboard shows, read from batch output directories while runners write.

Lists, counts and aggregates come from `proctor.store`'s readers (SQL over the
read-only index, one page at a time, never a whole batch in memory); this module
finds the batches and shapes what the pages show.
"""

from __future__ import annotations

import os
from collections import Counter
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from .. import store
from ..store import RolloutQuery

__all__ = [
    "MATRIX_LIMIT",
    "PAGE_LIMIT",
    "BatchDir",
    "attempts",
    "batch_summary",
    "compare_tasks",
    "cost_curve",
    "discover",
    "discover_more",
    "errors_by_phase",
    "group_reward_bins",
    "index_row",
    "model_task",
    "parse_query",
    "query_rollouts",
    "reward_bins",
    "signature",
    "unpriced_model",
]

MATRIX_LIMIT = 2000
PAGE_LIMIT = 500
CURVE_POINTS = 200
GROUP_LIMIT = 30
COMPARE_LIMIT = 2000


@dataclass(frozen=True, slots=True)
class BatchDir:
    """A batch output directory and the unique name the dashboard calls it by."""

    name: str
    path: str


def discover(paths: Iterable[str | os.PathLike[str]]) -> dict[str, BatchDir]:
    """Batches named by folder: each path is an output dir, or a folder holding some.

    A name seen before gets `-2`, `-3`, ...

    Raises:
        FileNotFoundError: a path is neither a batch nor a folder.
    """
    return discover_more(paths, {})


def discover_more(
    paths: Iterable[str | os.PathLike[str]], known: Mapping[str, BatchDir]
) -> dict[str, BatchDir]:
    """The batches under `paths` not in `known` (by folder), named unique against it.

    Raises:
        FileNotFoundError: a path is neither a batch nor a folder.
    """
    seen = {b.path for b in known.values()}
    taken = set(known)
    found: dict[str, BatchDir] = {}
    for path in paths:
        for folder in _batch_folders(os.fspath(path)):
            if folder in seen:
                continue
            seen.add(folder)
            name = base = os.path.basename(os.path.normpath(folder)) or "batch"
            n = 1
            while name in taken:
                n += 1
                name = f"{base}-{n}"
            taken.add(name)
            found[name] = BatchDir(name, folder)
    return found


def _batch_folders(path: str) -> list[str]:
    if os.path.isfile(os.path.join(path, "batch.json")):
        return [path]
    if not os.path.isdir(path):
        raise FileNotFoundError(f"{path}: no such folder")
    with os.scandir(path) as entries:
        subs = sorted(e.path for e in entries if e.is_dir() and not e.name.startswith("."))
    return [s for s in subs if os.path.isfile(os.path.join(s, "batch.json"))]


def signature(batch: BatchDir) -> tuple[int, ...]:
    """Changes whenever the batch's index or events do (sizes and mtimes)."""
    out: list[int] = []
    for name in ("events.jsonl", "index.sqlite", "index.sqlite-wal"):
        try:
            st = os.stat(os.path.join(batch.path, name))
        except FileNotFoundError:
            out += [-1, -1]
        else:
            out += [st.st_size, st.st_mtime_ns]
    return tuple(out)


def batch_summary(batch: BatchDir) -> dict[str, Any]:
    """Name, counts by status, total, mean reward, cost, start, finish, throughput
    (ended rollouts per second from the first start to the last end), last update, and
    `unpriced`: the models the batch's pricing does not know and no cost was recorded
    for (their cost is unknown), `priced`: whether any other model was used."""
    figures = store.totals(batch.path)  # first: it checks the index is no link
    counts = {str(k): n for k, n in store.count_rollouts(batch.path, by="status").items()}
    meta = store.read_batch(batch.path)
    models = store.cost_by_model(batch.path)
    pricing = meta.get("pricing")
    if not isinstance(pricing, dict):
        pricing = {}
    total, ended = sum(counts.values()), figures.ended
    first, last = figures.first_start, figures.last_end
    span = (last - first) if first is not None and last is not None else 0.0
    return {
        "name": batch.name,
        "batch_id": meta.get("batch_id"),
        "counts": counts,
        "total": total,
        "mean_reward": figures.mean_reward,
        "cost": figures.cost,
        "started": meta.get("created_at"),
        "finished": last if total and ended == total else None,
        "throughput": ended / span if ended and span > 0 else None,
        "updated": _updated(batch.path),
        "unpriced": sorted(str(m) for m, c in models.items() if _unpriced(m, c, pricing)),
        "priced": any(m is not None and not _unpriced(m, c, pricing) for m, c in models.items()),
    }


def _unpriced(model: Any, cost: float, pricing: Mapping[str, Any]) -> bool:
    """A model the batch has no price for and no recorded cost of (a cost of 0 there
    means unknown, not free)."""
    return model is not None and model not in pricing and not cost


def unpriced_model(batch: BatchDir, model: Any, cost: Any) -> bool:
    """Whether a rollout of `model` that recorded `cost` has an unknown cost: its
    model has no price in the batch's `batch.json` and the cost is 0 or none."""
    pricing = store.read_batch(batch.path).get("pricing")
    return _unpriced(model, cost or 0.0, pricing if isinstance(pricing, dict) else {})


def _updated(path: str) -> float | None:
    try:
        return os.stat(os.path.join(path, "events.jsonl")).st_mtime
    except FileNotFoundError:
        return None


def errors_by_phase(batch: BatchDir) -> dict[str, int]:
    """Failed rollouts by the phase at fault."""
    counts = store.count_rollouts(batch.path, by="error_phase")
    return {str(k): n for k, n in sorted(counts.items(), key=_key) if k is not None}


def _key(item: tuple[Any, int]) -> str:
    return str(item[0])


def model_task(batch: BatchDir, limit: int = MATRIX_LIMIT) -> list[dict[str, Any]]:
    """Mean reward, graded and total counts per (agent, model, task), sorted by task
    then agent and model; at most `limit` cells (a batch of many tasks has many)."""
    return store.cell_means(batch.path, limit)


def reward_bins(batch: BatchDir, bins: int = 10) -> dict[str, Any]:
    """A histogram of rewards: `lo`, `hi` and `counts` (`bins` equal-width bins)."""
    return store.reward_histogram(batch.path, bins)


def group_reward_bins(
    batch: BatchDir, by: str, bins: int = 10, limit: int = GROUP_LIMIT
) -> dict[str, Any]:
    """Reward histograms per agent, model or task (the first `limit` by name), on the batch's
    range: `lo`, `hi`, `groups` ({name: counts}) and `more` (groups not shown)."""
    return store.group_reward_histograms(batch.path, by, bins, limit)


def cost_curve(batch: BatchDir, points: int = CURVE_POINTS) -> list[tuple[float, float]]:
    """Cumulative cost by `ended_at`, at most `points` (time, cost) pairs."""
    return store.cost_curve(batch.path, points)


def _change(delta: float | None) -> str:
    if delta is None:
        return "missing"
    return "better" if delta > 1e-9 else "worse" if delta < -1e-9 else "same"


def compare_tasks(a: BatchDir, b: BatchDir, limit: int = COMPARE_LIMIT) -> dict[str, Any]:
    """Task by task: mean reward and counts in `a` and `b`, the delta (b - a) and its
    `change` (better, worse, same; missing when a side has no graded rollout), sorted by
    delta (largest first; missing last); the first `limit` rows, totals over all."""
    left, right = store.task_means(a.path), store.task_means(b.path)
    rows: list[dict[str, Any]] = []
    for task in sorted(left.keys() | right.keys()):
        ma, ga, ta = left.get(task, (None, 0, 0))
        mb, gb, tb = right.get(task, (None, 0, 0))
        delta = mb - ma if ma is not None and mb is not None else None
        rows.append(
            {
                "task": task,
                "a": (ma, ga, ta),
                "b": (mb, gb, tb),
                "delta": delta,
                "change": _change(delta),
            }
        )
    rows.sort(key=lambda r: (r["delta"] is None, -(r["delta"] or 0.0), r["task"]))
    changes = Counter(r["change"] for r in rows)
    return {
        "rows": rows[:limit],
        "more": max(0, len(rows) - limit),
        "changes": {k: changes.get(k, 0) for k in ("better", "worse", "same", "missing")},
        "a": _overall(a.path),
        "b": _overall(b.path),
    }


def _overall(path: str) -> tuple[float | None, int, int]:
    figures = store.totals(path)
    return figures.mean_reward, figures.graded, figures.total


def parse_query(params: Mapping[str, str]) -> RolloutQuery:
    """The rollouts table's filters, sort and page from the API's parameters (`status`,
    `task`, `agent`, `model`, `error_phase`, `q`: text in the id, `reward_min`,
    `reward_max`, `order_by`, `desc=1`, `offset`, `limit`); empty ones mean no filter.

    Raises:
        ValueError: a number that does not parse, or an unknown sort column.
    """
    return RolloutQuery(
        status=params.get("status") or None,
        task=params.get("task") or None,
        agent=params.get("agent") or None,
        model=params.get("model") or None,
        error_phase=params.get("error_phase") or None,
        id_contains=params.get("q", ""),
        reward_min=_float(params.get("reward_min")),
        reward_max=_float(params.get("reward_max")),
        order_by=params.get("order_by") or "seq",
        descending=params.get("desc") == "1",
        offset=max(0, int(params.get("offset") or 0)),
        limit=min(PAGE_LIMIT, max(1, int(params.get("limit") or 200))),
    )


def _float(text: str | None) -> float | None:
    return float(text) if text else None


def query_rollouts(batch: BatchDir, query: RolloutQuery) -> dict[str, Any]:
    """`{"total": matching rows, "rows": [index rows of the page]}`."""
    page = store.page_rollouts(batch.path, query)
    return {"total": page.total, "rows": page.rows}


def index_row(batch: BatchDir, rollout_id: str) -> dict[str, Any] | None:
    """The rollout's index row, or None for an id the index does not know."""
    return store.index_row(batch.path, rollout_id)


def attempts(batch: BatchDir, rollout_id: str) -> list[int]:
    """The rollout's archived attempt numbers (folders under `attempts/`)."""
    try:
        names = os.listdir(os.path.join(batch.path, "rollouts", rollout_id, "attempts"))
    except OSError:
        return []
    return sorted(int(n) for n in names if n.isascii() and n.isdigit())
