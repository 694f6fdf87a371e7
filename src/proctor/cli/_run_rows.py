"""`proctor run` checks every row against the environment's templates before the
first rollout, and refuses (or with `--allow-invalid` drops) the rows that do not fit."""

from __future__ import annotations

import os
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ._common import CLIError
from ._run_sources import is_remote, row_places

if TYPE_CHECKING:
    from ._run_plan import RunPlan

__all__ = ["check_rows"]


async def check_rows(plan: RunPlan) -> None:
    """Check every row against the environment's templates before the first rollout:
    in this process for the local runtime, in a child process (as the batch plan does)
    for the runtimes that start processes, by schema through `tasks.list` for a
    server. Refuse with every bad row listed, or with `--allow-invalid` drop them.

    Raises:
        CLIError: a bad row (without `--allow-invalid`), or no environment to ask.
    """
    where = plan.where
    if where.imported is not None and where.served is None:
        return  # an importer's rows, for the environment it serves on its own runtime
    rows = [t.model_dump(mode="json", exclude_none=True) for t in plan.taskset]
    if where.served is not None:
        from ..batch._plan_probe import _row_problem

        problems = {r["slug"]: p for r in rows if (p := _row_problem(where.served, r))}
    elif is_remote(where.runtime):
        problems = await _server_problems(plan, rows)
    else:
        problems = await _probe_problems(plan)
    if not problems:
        return
    places = row_places(plan.source, plan.taskset)
    lines = [f"  {places[slug]}: {problems[slug]}" for slug in places if slug in problems]
    head = f"{len(problems)} of {len(rows)} rows do not fit the environment"
    if not plan.allow_invalid:
        raise CLIError(f"{head} (--allow-invalid runs the others):\n" + "\n".join(lines))
    print(f"warning: {head}; skipped (--allow-invalid):", *lines, sep="\n", file=sys.stderr)
    plan.taskset = plan.taskset.exclude(problems)


async def _server_problems(plan: RunPlan, rows: list[dict[str, Any]]) -> dict[str, str]:
    """Each row checked by name against the served templates' published schemas."""
    from ..batch._plan_env import _schema_problem
    from ..channel import connect

    where = plan.where
    async with connect(where.runtime, ready_timeout=plan.ready_timeout, token=where.token) as c:
        listed = await c.list_tasks()
        assert c.manifest is not None
        env = c.manifest.env_name
    templates = {t["id"]: t.get("args") for t in listed if isinstance(t, dict) and "id" in t}
    return {r["slug"]: p for r in rows if (p := _schema_problem(env, templates, r))}


async def _probe_problems(plan: RunPlan) -> dict[str, str]:
    """Each row bound to its template in a child process that imports the sources."""
    from ..batch._plan_env import _ProbeFailed, _run_probe

    request = _probe_request(plan)
    try:
        answer = await _run_probe(request, Path.cwd())
    except _ProbeFailed as exc:
        raise CLIError(f"{plan.where.env_source}: {exc}") from None
    env = answer.get("environment") or {}
    if env.get("error"):
        raise CLIError(env["error"])
    problems: dict[str, str] = env.get("row_problems") or {}
    return problems


def _probe_request(plan: RunPlan) -> dict[str, Any]:
    return {
        "taskset": os.path.abspath(plan.source),
        "env_source": os.path.abspath(plan.where.env_source),
        "env": plan.where.env_name,
        "agents": [],
    }
