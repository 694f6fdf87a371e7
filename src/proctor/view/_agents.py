"""The agent as a dimension of the dashboard: flakiness across repeats, group rewards
and advantages per agent, and the paired comparison of two agents (`/compare`).

Rewards are counted as `proctor batch report` and `compare` count them (`scored`:
a failure before grading is 0; an evaluation failure is left out).
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any

from .. import store
from ._data import BatchDir
from ._rollout_files import read_record

__all__ = ["GROUP_RECORDS", "agent_comparison", "agent_names", "agent_sections"]

GROUP_RECORDS = 2000
"""Records read at most for the group rewards summary (they are not in the index)."""
FLAKY_ROWS = 200
"""Per-task flakiness rows kept per agent (the flaky ones first)."""
TOP_CHANGES = 20


def agent_names(batch: BatchDir) -> list[str]:
    """The batch's agents, sorted (from its index)."""
    return sorted(str(a) for a in store.distinct_values(batch.path, "agent"))


def agent_sections(batch: BatchDir) -> dict[str, Any]:
    """`repeats` (the most of any task), `flakiness` (agent -> `flakiness` with at most
    `FLAKY_ROWS` rows, flaky first) and `groups` (agent -> mean group rewards and
    advantage, over at most `GROUP_RECORDS` ended rollouts; `more`: some were left
    out); both empty with one repeat (a group has two rollouts and more)."""
    repeats = store.totals(batch.path).max_repeat
    if repeats < 2:  # no flakiness, and group rewards need groups of two and more
        return {"repeats": repeats, "flakiness": {}, "groups": {}, "more": False}
    return {"repeats": repeats, "flakiness": _flakiness(batch), **_groups(batch)}


def _flakiness(batch: BatchDir) -> dict[str, Any]:
    from ..batch import flakiness, scored  # the statistics (the runner loads on first use)

    rewards: dict[str, dict[str, list[float]]] = {}
    columns = ("agent", "task", "reward", "status", "error_phase")
    rows = store.rollout_columns(batch.path, columns, store.RolloutQuery(limit=None))
    for agent, task, reward, status, phase in rows:
        value = scored({"reward": reward, "status": status, "error_phase": phase})
        if value is not None:
            rewards.setdefault(str(agent or "-"), {}).setdefault(str(task), []).append(value)
    out: dict[str, Any] = {}
    for agent, by_task in sorted(rewards.items()):
        doc = flakiness(by_task)
        rows_ = sorted(doc["per_task"], key=lambda r: (not r["flaky"], r["task"]))
        out[agent] = {**doc, "per_task": rows_[:FLAKY_ROWS], "more": len(rows_) > FLAKY_ROWS}
    return out


def _groups(batch: BatchDir) -> dict[str, Any]:
    from ..batch import advantage_summary  # the statistics (the runner loads on first use)

    query = store.RolloutQuery(ended=True, limit=GROUP_RECORDS + 1)
    rows = store.rollout_columns(batch.path, ("id", "agent"), query)
    ids = [(rid, agent or "-") for rid, agent in rows]
    sums: dict[str, dict[str, list[float]]] = {}
    advantages: dict[str, list[float]] = {}
    refused: list[str] = []
    for rid, agent in ids[:GROUP_RECORDS]:
        record = read_record(batch.path, rid, refused) or {}
        groups = record.get("group_rewards")
        if isinstance(groups, Mapping):
            for name, v in groups.items():
                if _number(v):
                    sums.setdefault(str(agent), {}).setdefault(str(name), []).append(float(v))
        if _number(record.get("advantage")):
            advantages.setdefault(str(agent), []).append(float(record["advantage"]))
    groups_out: dict[str, Any] = {}
    for agent in sorted(sums.keys() | advantages.keys()):
        adv = advantages.get(agent, [])
        groups_out[agent] = {
            "group_rewards": {k: _mean(v) for k, v in sorted(sums.get(agent, {}).items())},
            "advantage": advantage_summary(adv),
        }
    return {"groups": groups_out, "more": len(ids) > GROUP_RECORDS}


def _number(value: Any) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool) and math.isfinite(value)


def _mean(values: list[float]) -> float:
    return math.fsum(values) / len(values)


def agent_comparison(
    a: BatchDir, b: BatchDir, agent_a: str | None, agent_b: str | None
) -> dict[str, Any]:
    """`proctor batch compare` of agent B (in `b`) against agent A (in `a`): the
    statistics, `verdict`, `top` (the largest per-task changes) and `error` (why
    there is none: an agent to choose, say; then the rest is absent).

    Raises:
        StoreError: a batch's index is missing or damaged.
    """
    from ..batch import compare  # reads both batches' stores (the runner loads on first use)

    try:
        doc = compare(
            a.path, None if a.path == b.path else b.path, agent_a=agent_a, agent_b=agent_b
        )
    except ValueError as exc:
        return {"error": str(exc)}
    top = sorted(doc["per_task"], key=lambda r: (-abs(r["delta"]), r["task"]))
    return {**doc, "error": None, "top": [r for r in top if r["delta"]][:TOP_CHANGES]}
