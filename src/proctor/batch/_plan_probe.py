"""The plan's child process: load a taskset and its environment away from the planner.

Importing a Python taskset or environment runs user code, which may start threads,
open files or print; doing it in a child keeps the planning process read-only and
unaffected. Run as `python -m proctor.batch._plan_probe` with a JSON request on
stdin; the JSON answer is the last line of stdout (the user code's own prints go to
stderr). It only imports: no initialize hook runs, nothing is served.
"""

from __future__ import annotations

import contextlib
import os
import sys
from typing import Any

import orjson

__all__ = ["main", "probe"]


def probe(request: dict[str, Any]) -> dict[str, Any]:
    """Load what `request` names: `{taskset, limit, slugs, env_source, env, agents}`.

    Paths are absolute or relative to the working directory (the config's folder).
    """
    answer: dict[str, Any] = {"taskset": _taskset(request)}
    answer["agents"] = {spec: _agent_problem(spec) for spec in request.get("agents") or ()}
    rows = answer["taskset"].get("rows")
    if request.get("env_source"):
        answer["environment"] = _environment(request["env_source"], request.get("env"), rows)
    return answer


def _taskset(request: dict[str, Any]) -> dict[str, Any]:
    from ..tasks import Taskset

    try:
        taskset = Taskset.from_file(request["taskset"], limit=request.get("limit"))
        if request.get("slugs") is not None:
            taskset = taskset.filter(request["slugs"])
    except Exception as exc:
        return {"error": _message(exc)}
    rows = [task.model_dump(mode="json", exclude_none=True) for task in taskset]
    return {"name": taskset.name, "rows": rows}


def _environment(
    source: str, name: str | None, rows: list[dict[str, Any]] | None
) -> dict[str, Any]:
    from .._loader import find_environment

    try:
        env = find_environment(source, name)
    except Exception as exc:
        return {"error": _message(exc)}
    problems = {}
    for row in rows or ():
        problem = _row_problem(env, row)
        if problem is not None:
            problems[row["slug"]] = problem
    return {
        "name": env.name,
        "version": env.version,
        "templates": sorted(env.tasks),
        "group_rewards": [reward.name for reward in env.group_rewards],
        "row_problems": problems,
    }


def _row_problem(env: Any, row: dict[str, Any]) -> str | None:
    if row["env"] != env.name:
        return f"its environment {row['env']!r} is not the one served ({env.name!r})"
    template = env.tasks.get(row["id"])
    if template is None:
        known = ", ".join(sorted(env.tasks)) or "none"
        return f"no template {row['id']!r} in environment {env.name!r} (known: {known})"
    try:
        template.bind(row.get("args") or {})
    except Exception as exc:
        return _message(exc)
    return None


def _agent_problem(spec: str) -> str | None:
    """Why `spec` is no agent, as `proctor run --agent` would refuse it; None if it is."""
    from .._loader import load_agent
    from ..agents import agent_from_fn

    try:
        load_agent(spec, spec.rpartition(":")[0], wrap=agent_from_fn)
    except Exception as exc:
        return _message(exc)
    return None


def _message(exc: BaseException) -> str:
    return str(exc) or type(exc).__name__


def main() -> None:
    """Read the request on stdin, answer on the original stdout."""
    request = orjson.loads(sys.stdin.buffer.read())
    out = os.dup(1)
    os.dup2(2, 1)  # the user code's prints land on stderr, not in the answer
    with contextlib.redirect_stdout(sys.stderr):
        answer = probe(request)
    with os.fdopen(out, "wb") as stdout:
        stdout.write(orjson.dumps(answer) + b"\n")


if __name__ == "__main__":
    main()
