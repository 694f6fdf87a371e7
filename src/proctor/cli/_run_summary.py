"""`proctor run`'s summary: totals and one row per template, as JSON or a table."""

from __future__ import annotations

from collections import Counter
from typing import TYPE_CHECKING, Any

from ._common import table

if TYPE_CHECKING:
    from ..agents import Run
    from ..engine import Job

__all__ = ["Totals", "render", "summarize"]


class Totals:
    """Runs, rewards, errors, budget stops, tokens and cost of some runs, added one by
    one as they end (nothing kept per run)."""

    def __init__(self) -> None:
        self.runs = self.graded = self.errors = self.evaluation_failed = 0
        self.reward_sum = 0.0
        self.stop_reasons: Counter[str] = Counter()
        self.usage: Counter[str] = Counter()
        self.cost: float | None = None

    def add(self, run: Run) -> None:
        """Count one ended run."""
        self.runs += 1
        if run.reward is not None:
            self.graded += 1
            self.reward_sum += run.reward
        self.errors += run.error is not None
        self.evaluation_failed += run.evaluation_failed
        if run.stop_reason:
            self.stop_reasons[run.stop_reason] += 1
        self.usage.update({k: v for k, v in run.usage.items() if isinstance(v, int)})
        cost = run.cost
        if cost is not None:
            self.cost = cost + (self.cost or 0.0)

    def to_dict(self) -> dict[str, Any]:
        """The totals, JSON-ready."""
        return {
            "runs": self.runs,
            "graded": self.graded,
            "mean_reward": self.reward_sum / self.graded if self.graded else None,
            "errors": self.errors,
            "evaluation_failed": self.evaluation_failed,
            "stop_reasons": dict(self.stop_reasons),
            "usage": dict(self.usage),
            "cost_usd": self.cost,
        }


def summarize(
    job: Job,
    wall: float,
    templates: dict[tuple[str, str], Totals],
    errors: list[dict[str, Any]],
) -> dict[str, Any]:
    """The job's totals plus one row per template (`templates`: by env and template
    id), JSON-ready; `errors` become `first_errors`."""
    several_envs = len({env for env, _ in templates}) > 1
    rows = [
        {"template": f"{env}/{tid}" if several_envs else tid, "env": env, "id": tid}
        | totals.to_dict()
        for (env, tid), totals in templates.items()
    ]
    total = Totals()
    for totals in templates.values():
        total.evaluation_failed += totals.evaluation_failed
        total.stop_reasons.update(totals.stop_reasons)
        total.usage.update(totals.usage)
        if totals.cost is not None:
            total.cost = totals.cost + (total.cost or 0.0)
    runs = job.stats.runs
    return {
        **job.to_dict(),
        "wall_time_s": wall,
        "rollouts_per_s": runs / wall if wall > 0 else None,
        "stop_reasons": dict(total.stop_reasons),
        "evaluation_failed": total.evaluation_failed,
        "usage": dict(total.usage),
        "cost_usd": total.cost,
        "templates": rows,
        "first_errors": errors,
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
