"""`row_problems`: why rows do not fit their environment, checked as the batch plan
checks them, before anything runs."""

from __future__ import annotations

import os
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ._plan_env import _ProbeFailed, _run_probe, _schema_problem
from ._plan_probe import _row_problem

if TYPE_CHECKING:
    from ..env import Environment
    from ..tasks import Taskset

__all__ = ["row_problems"]


async def row_problems(
    taskset: Taskset,
    *,
    served: Environment | None = None,
    url: str | None = None,
    token: str | None = None,
    ready_timeout: float = 5.0,
    sources: tuple[str, str, str | None] | None = None,
) -> dict[str, str]:
    """What is wrong with each row that does not fit, by slug (rows that fit are left
    out), checked where the environment is: bound to its template in this process
    (`served`); by name against the templates a server at `url` publishes (shared
    `token`); or bound in a child process that imports `sources`, `(taskset source,
    environment source, environment name)`, as the batch plan's probe does, so that
    task code never runs in this one.

    Raises:
        ValueError: none of the three is given, or the environment could not be loaded
            or reached (the message says which and why).
    """
    rows = [t.model_dump(mode="json", exclude_none=True) for t in taskset]
    if served is not None:
        return {r["slug"]: p for r in rows if (p := _row_problem(served, r))}
    if url is not None:
        return await _server_problems(rows, url, token, ready_timeout)
    if sources is not None:
        return await _probe_problems(*sources)
    raise ValueError("row_problems needs served, url or sources")


async def _server_problems(
    rows: list[dict[str, Any]], url: str, token: str | None, ready_timeout: float
) -> dict[str, str]:
    from ..channel import connect

    async with connect(url, ready_timeout=ready_timeout, token=token) as client:
        listed = await client.list_tasks()
        assert client.manifest is not None
        env = client.manifest.env_name
    templates = {t["id"]: t.get("args") for t in listed if isinstance(t, dict) and "id" in t}
    return {r["slug"]: p for r in rows if (p := _schema_problem(env, templates, r))}


def _probe_request(source: str, env_source: str, env_name: str | None) -> dict[str, Any]:
    return {
        "taskset": os.path.abspath(source),
        "env_source": os.path.abspath(env_source),
        "env": env_name,
        "agents": [],
    }


async def _probe_problems(source: str, env_source: str, env_name: str | None) -> dict[str, str]:
    try:
        answer = await _run_probe(_probe_request(source, env_source, env_name), Path.cwd())
    except _ProbeFailed as exc:
        raise ValueError(f"{env_source}: {exc}") from None
    env = answer.get("environment") or {}
    if env.get("error"):
        raise ValueError(env["error"])
    problems: dict[str, str] = env.get("row_problems") or {}
    return problems
