"""`proctor batch compare`: two agents (of one batch or two) paired over their tasks.

An arm is one agent's rollouts in one output directory, read through the index
(`list_rollouts`). What counts as a rollout's reward (`scored`): its reward; 0 when it
failed before it was graded (the agent's error: it did not solve the task); none when
its evaluation failed (the grader's error, not the agent's) or it did not end. Tasks
are matched by slug. The statistics are `_stats.paired_comparison`.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from typing import Any

from ..store import count_rollouts, list_rollouts, read_batch
from . import _stats
from ._report_render import num, table

__all__ = [
    "EVALUATION_PHASES",
    "FORMAT",
    "agents_of",
    "arm_rewards",
    "compare",
    "render_comparison",
    "scored",
]

FORMAT = "proctor.batch.compare/1"
EVALUATION_PHASES = frozenset({"grading", "verifying"})
"""Error phases that are the grader's failure, not the agent's."""
_TOP = 10


def scored(row: Mapping[str, Any]) -> float | None:
    """The reward a comparison counts for an index row (see the module docstring)."""
    if row.get("reward") is not None:
        return float(row["reward"])
    if row.get("status") == "failed" and row.get("error_phase") not in EVALUATION_PHASES:
        return 0.0
    return None


def arm_rewards(out: str | os.PathLike[str], agent: str) -> tuple[dict[str, list[float]], int]:
    """`({task: [scored reward per repeat]}, rollouts left out)` of `agent` in `out`."""
    rewards: dict[str, list[float]] = {}
    left_out = 0
    for row in list_rollouts(out, agent=agent, limit=None):
        value = scored(row)
        if value is None:
            left_out += 1
        else:
            rewards.setdefault(str(row["task"]), []).append(value)
    return rewards, left_out


def agents_of(out: str | os.PathLike[str]) -> list[str]:
    """The agent names of a batch, sorted."""
    return sorted(str(a) for a in count_rollouts(out, by="agent") if a is not None)


def compare(
    a_out: str | os.PathLike[str],
    b_out: str | os.PathLike[str] | None = None,
    *,
    agent_a: str | None = None,
    agent_b: str | None = None,
    threshold: float = 1.0,
    confidence: float = 0.95,
    resamples: int = _stats.RESAMPLES,
    seed: int = 0,
) -> dict[str, Any]:
    """The paired comparison of agent B (in `b_out`, default `a_out`) against agent A.

    An agent left unnamed is the batch's only one; inside one batch of exactly two
    agents, A and B are the two in sorted order.

    Raises:
        StoreError: a directory is not a batch output directory.
        ValueError: an agent is not in its batch, or cannot be chosen unnamed.
    """
    b_root = a_out if b_out is None else b_out
    agent_a, agent_b = _choose(a_out, b_root, agent_a, agent_b, same=b_out is None)
    a, a_left = arm_rewards(a_out, agent_a)
    b, b_left = arm_rewards(b_root, agent_b)
    doc = _stats.paired_comparison(
        a, b, threshold=threshold, confidence=confidence, resamples=resamples, seed=seed
    )
    doc["a"].update(_side(a_out, agent_a, a_left))
    doc["b"].update(_side(b_root, agent_b, b_left))
    return {
        "format": FORMAT,
        **doc,
        "only_a": sorted(set(a) - set(b)),
        "only_b": sorted(set(b) - set(a)),
        "verdict": _stats.verdict(doc, _label(doc["a"], doc["b"]), _label(doc["b"], doc["a"])),
    }


def _side(out: str | os.PathLike[str], agent: str, left_out: int) -> dict[str, Any]:
    meta = read_batch(os.fspath(out))
    return {
        "out": os.path.abspath(out),
        "batch": meta.get("name") or os.path.basename(os.path.abspath(out)),
        "agent": agent,
        "left_out": left_out,
    }


def _label(side: Mapping[str, Any], other: Mapping[str, Any]) -> str:
    """The agent's name, with its batch's when both sides have the same agent name."""
    if side["agent"] == other["agent"]:
        return f"{side['batch']}:{side['agent']}"
    return str(side["agent"])


def _choose(
    a_out: str | os.PathLike[str],
    b_out: str | os.PathLike[str],
    agent_a: str | None,
    agent_b: str | None,
    *,
    same: bool,
) -> tuple[str, str]:
    names_a = agents_of(a_out)
    names_b = names_a if same else agents_of(b_out)
    if same and agent_a is None and agent_b is None:
        if len(names_a) != 2:
            raise ValueError(
                f"{a_out} has {len(names_a)} agent(s) ({', '.join(names_a) or 'none'}): "
                "name the two to compare (--agents A B)"
            )
        return names_a[0], names_a[1]
    return _pick(a_out, names_a, agent_a, "--agent-a"), _pick(b_out, names_b, agent_b, "--agent-b")


def _pick(out: str | os.PathLike[str], names: list[str], agent: str | None, flag: str) -> str:
    if agent is not None:
        if agent not in names:
            raise ValueError(f"{out} has no agent {agent!r}; its agents: {', '.join(names)}")
        return agent
    if len(names) != 1:
        raise ValueError(
            f"{out} has {len(names)} agents ({', '.join(names) or 'none'}): choose one with {flag}"
        )
    return names[0]


# -- rendering -------------------------------------------------------------------------


def render_comparison(doc: Mapping[str, Any], top: int = _TOP) -> str:
    """Human text of a comparison: the arms, the verdict, the largest per-task changes."""
    a, b = doc["a"], doc["b"]
    lines = [
        f"A: {a['agent']} in {a['out']}",
        f"B: {b['agent']} in {b['out']}",
        f"tasks: {doc['tasks']} matched, {len(doc['only_a'])} only in A, "
        f"{len(doc['only_b'])} only in B; pass = reward >= {doc['threshold']:g}",
        "",
        _arms_table(doc),
        "",
        doc["verdict"],
    ]
    diff, test = doc["difference"], doc["pass_fail"]
    if diff is not None:
        se = "-" if diff["se"] is None else f"{diff['se']:.3f}"
        how = (
            f"bootstrap: {diff['resamples']:,} resamples of the tasks, seed {diff['seed']}"
            if diff["method"] == "bootstrap"
            else "CI: the normal approximation (too many tasks to bootstrap)"
        )
        lines.append(f"difference of the means: SE {se} (clustered by task); {how}")
        lines.append(
            f"pass/fail by task: B better {test['b_better']}, A better {test['a_better']}, "
            f"same {test['ties']}"
        )
    changes = sorted(doc["per_task"], key=lambda r: (-abs(r["delta"]), r["task"]))
    changes = [r for r in changes if r["delta"]][:top]
    if changes:
        lines += ["", f"Largest per-task changes (top {len(changes)}; all with --json)"]
        lines.append(_changes_table(changes))
    return "\n".join(lines) + "\n"


def _arms_table(doc: Mapping[str, Any]) -> str:
    rows = []
    for side in ("a", "b"):
        arm = doc[side]
        rows.append(
            [
                side.upper(),
                str(arm["agent"]),
                str(arm["rollouts"]),
                num(arm["mean"]),
                num(arm["se"]),
                num(arm["pass_rate"]),
                str(arm["left_out"]),
            ]
        )
    head = ["arm", "agent", "rollouts", "mean reward", "SE", "pass rate", "left out"]
    return table(head, rows, left={0, 1})


def _changes_table(rows: list[Mapping[str, Any]]) -> str:
    body = [
        [str(r["task"]), num(r["a_mean"]), num(r["b_mean"]), f"{r['delta']:+.3f}"] for r in rows
    ]
    return table(["task", "A mean", "B mean", "B - A"], body)
