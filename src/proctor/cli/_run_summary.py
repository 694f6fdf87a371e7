"""`proctor run`'s summary: totals and one row per template, as JSON or a table."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from ._common import table

if TYPE_CHECKING:
    from ..engine import Job, RunSummary

__all__ = ["render", "summarize"]


def summarize(job: Job, wall: float, errors: list[dict[str, Any]]) -> dict[str, Any]:
    """The job's totals plus one row per template, JSON-ready, from its run summaries;
    `errors` (`Ended.errors`) become `first_errors`."""
    by_template: dict[tuple[str, str], list[RunSummary]] = {}
    for s in job.summaries:
        by_template.setdefault((s.env, s.task_id), []).append(s)
    several_envs = len({env for env, _ in by_template}) > 1
    templates = [
        {"template": f"{env}/{tid}" if several_envs else tid, "env": env, "id": tid} | _totals(runs)
        for (env, tid), runs in by_template.items()
    ]
    total = _totals(job.summaries)
    return {
        **job.to_dict(),
        "wall_time_s": wall,
        "rollouts_per_s": len(job.summaries) / wall if wall > 0 else None,
        "stop_reasons": total["stop_reasons"],
        "evaluation_failed": total["evaluation_failed"],
        "usage": total["usage"],
        "cost_usd": total["cost_usd"],
        "templates": templates,
        "first_errors": errors,
    }


def _totals(runs: list[RunSummary]) -> dict[str, Any]:
    """Runs, rewards, errors, budget stops, tokens and cost of some runs."""
    from collections import Counter

    rewards = [r.reward for r in runs if r.reward is not None]
    usage: Counter[str] = Counter()
    for run in runs:
        usage.update({k: v for k, v in run.usage.items() if isinstance(v, int)})
    costs = [r.cost for r in runs if r.cost is not None]
    return {
        "runs": len(runs),
        "graded": len(rewards),
        "mean_reward": sum(rewards) / len(rewards) if rewards else None,
        "errors": sum(1 for r in runs if r.error_phase is not None),
        "evaluation_failed": sum(1 for r in runs if r.evaluation_failed),
        "stop_reasons": dict(Counter(r.stop_reason for r in runs if r.stop_reason)),
        "usage": dict(usage),
        "cost_usd": sum(costs) if costs else None,
    }


def _mean(value: float | None) -> str:
    return "-" if value is None else f"{value:.3f}"


def _tokens(usage: dict[str, int]) -> str:
    total = usage.get("total_tokens") or usage.get("input_tokens", 0) + usage.get(
        "output_tokens", 0
    )
    return str(total) if usage else "-"


def _cost(cost: float | None) -> str:
    return "-" if cost is None else f"${cost:.4f}"


def render(summary: dict[str, Any]) -> str:
    """The human summary: a table per template, a total row, timing, budget stops,
    errors (with tracebacks) and where the record is."""
    rows = [*summary["templates"], {"template": "total", **summary}]
    columns: list[tuple[str, Any]] = [
        ("template", lambda t: t["template"]),
        ("runs", lambda t: t["runs"]),
        ("mean reward", lambda t: _mean(t["mean_reward"])),
        ("errors", lambda t: t["errors"]),
    ]
    if summary["evaluation_failed"]:  # a grader raised: not a reward of 0
        columns.append(("eval failed", lambda t: t["evaluation_failed"]))
    if summary["stop_reasons"]:
        columns.append(("stopped", lambda t: sum(t["stop_reasons"].values())))
    if summary["usage"] or summary["cost_usd"] is not None:
        columns += [
            ("tokens", lambda t: _tokens(t["usage"])),
            ("cost", lambda t: _cost(t["cost_usd"])),
        ]
    cells = [[get(t) for _, get in columns] for t in rows]
    right = set(range(1, len(columns)))
    lines = [table([name for name, _ in columns], cells, right=right)]
    runs, rate = summary["runs"], summary["rollouts_per_s"]
    timing = f"\n{runs} rollout{'' if runs == 1 else 's'} in {summary['wall_time_s']:.2f}s"
    lines.append(timing + (f" ({rate:.1f}/s)" if rate else ""))
    if summary["stop_reasons"]:
        stops = sorted(summary["stop_reasons"].items())
        lines.append("stopped by budget: " + ", ".join(f"{r} {n}" for r, n in stops))
    lines += _error_lines(summary)
    if summary.get("record"):
        lines.append(f"recorded in {summary['record']}  (proctor show {summary['record']})")
    return "\n".join(lines)


def _error_lines(summary: dict[str, Any]) -> list[str]:
    phases = summary["errors_by_phase"]
    if not phases:
        return []
    lines = ["errors by phase: " + ", ".join(f"{p} {n}" for p, n in sorted(phases.items()))]
    for err in summary["first_errors"]:
        message = err["message"].splitlines()[0] if err["message"] else ""
        lines.append(f"  {err['slug']} [{err['phase']}] {err['type']}: {message}")
        if err.get("traceback"):
            lines += ["    " + line for line in err["traceback"].rstrip().splitlines()]
    return lines
