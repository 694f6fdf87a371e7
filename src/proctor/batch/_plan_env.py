"""Plan check 4's evidence: the taskset's rows and what the environment serves.

Where the environment is loaded depends on the runtime, and the plan says which:
- local, subprocess, sandbox, ray: the environment source is imported in a child
  process (`_plan_probe`), which also checks every row's args against its template
  (`Template.bind`, exactly as a rollout's start would). No hook runs.
- url: the running server is asked (`hello`, `tasks.list`); args are checked by
  name against each template's published schema.
- container: the host's copy of the source (`taskset.env_source`) when the config
  names one, else one probe container started and removed by the runtime itself.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import orjson

from ._config import (
    BatchConfig,
    BatchConfigError,
    ContainerRuntimeConfig,
    PythonAgentEntry,
    UrlRuntimeConfig,
)
from ._config_runtime import build_runtime

__all__ = ["Loaded", "load"]

READY_TIMEOUT = 10.0  # seconds to reach a served environment and get its hello
PROBE_TIMEOUT = 120.0  # seconds for the child to import the taskset and environment
_TAIL = 2000  # characters of the child's stderr quoted when it fails


@dataclass
class Loaded:
    """The rows (None when the taskset failed to load) and the environment's answer."""

    rows: list[dict[str, Any]] | None = None
    taskset_name: str | None = None
    taskset_error: str | None = None
    env: dict[str, Any] | None = None
    env_error: str | None = None
    agent_problems: dict[str, str] = field(default_factory=dict)
    """Python agent spec (as `BatchConfig.resolve_agent` gives it) -> why it is no agent."""
    loaded_in: str = "not loaded"
    notes: list[str] = field(default_factory=list)


async def load(config: BatchConfig) -> Loaded:
    """Load the rows, then the environment the runtime will serve (see the module doc)."""
    runtime = config.runtime
    host_env = config.env_source()
    remote = isinstance(runtime, UrlRuntimeConfig) or (
        isinstance(runtime, ContainerRuntimeConfig) and config.taskset.env_source is None
    )
    loaded = await _child(config, None if remote else host_env)
    if loaded.rows is None or not remote:
        if host_env is None and not remote:
            loaded.env_error = (
                f"{config.taskset.source} is not a Python source, so it defines no "
                "environment; set taskset.env_source"
            )
        return loaded
    if isinstance(runtime, UrlRuntimeConfig):
        await _ask_server(loaded, config, runtime.url)
    else:
        await _ask_container(config, loaded)
    return loaded


async def _child(config: BatchConfig, host_env: str | None) -> Loaded:
    ts = config.taskset
    request = {
        "taskset": config.resolve(ts.source),
        "limit": ts.limit,
        "slugs": ts.slugs,
        "env_source": host_env,
        "env": ts.env,
        "agents": sorted(
            {
                config.resolve_agent(a.agent)
                for a in config.agents
                if isinstance(a, PythonAgentEntry)
            }
        ),
    }
    loaded = Loaded(loaded_in="child process" if host_env else "not loaded")
    try:
        answer = await _run_probe(request, config.base_dir)
    except _ProbeFailed as exc:
        loaded.taskset_error = loaded.env_error = str(exc)
        return loaded
    taskset = answer["taskset"]
    loaded.taskset_error = taskset.get("error")
    loaded.rows = taskset.get("rows")
    loaded.taskset_name = taskset.get("name")
    loaded.agent_problems = {k: v for k, v in answer.get("agents", {}).items() if v is not None}
    env = answer.get("environment")
    if env is not None:
        loaded.env_error = env.get("error")
        loaded.env = None if "error" in env else env
    return loaded


class _ProbeFailed(Exception):
    pass


async def _run_probe(request: dict[str, Any], cwd: Path) -> dict[str, Any]:
    proc = await asyncio.create_subprocess_exec(
        sys.executable,
        "-m",
        "proctor.batch._plan_probe",
        stdin=asyncio.subprocess.PIPE,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
        cwd=cwd,
        env={**os.environ, "PYTHONUNBUFFERED": "1"},
        start_new_session=True,
    )
    try:
        async with asyncio.timeout(PROBE_TIMEOUT):
            out, err = await proc.communicate(orjson.dumps(request))
    except TimeoutError:
        raise _ProbeFailed(f"loading took longer than {PROBE_TIMEOUT:g}s") from None
    finally:
        if proc.returncode is None:
            proc.kill()
            await proc.wait()
    lines = out.splitlines()
    if proc.returncode != 0 or not lines:
        tail = err.decode(errors="replace").strip()[-_TAIL:]
        raise _ProbeFailed(f"the loading process exited with {proc.returncode}: {tail}")
    answer: dict[str, Any] = orjson.loads(lines[-1])
    return answer


# -- through an endpoint ----------------------------------------------------------------


async def _ask_server(loaded: Loaded, config: BatchConfig, url: str) -> None:
    try:
        runtime = build_runtime(config)
    except BatchConfigError as exc:
        loaded.env_error = exc.problems[0].message
        return
    loaded.loaded_in = f"the server at {url}"
    await _ask(loaded, runtime, None)


async def _ask_container(config: BatchConfig, loaded: Loaded) -> None:
    from .._errors import RuntimeLaunchError
    from ..records import Task
    from ..runtimes import ContainerRuntime

    assert loaded.rows is not None
    if not loaded.rows:
        loaded.env_error = "no rows to start a probe container for"
        return
    try:
        runtime = build_runtime(config, batch=f"plan-{config.digest()[:12]}")
    except (RuntimeLaunchError, ValueError) as exc:  # no engine, a malformed option
        loaded.env_error = str(exc)
        return
    assert isinstance(runtime, ContainerRuntime)
    task = Task.model_validate(loaded.rows[0])
    loaded.loaded_in = "a probe container (removed after)"
    async with runtime:
        await _ask(loaded, runtime, task)


async def _ask(loaded: Loaded, provider: Any, task: Any) -> None:
    from ..channel import connect

    try:
        async with contextlib.AsyncExitStack() as stack:
            endpoint = await stack.enter_async_context(provider(task))
            c = await stack.enter_async_context(
                connect(endpoint.target, ready_timeout=READY_TIMEOUT, token=endpoint.token)
            )
            assert c.manifest is not None
            listed = await c.list_tasks()
            name, version = c.manifest.env_name, c.manifest.env_version
            capabilities = sorted(cap.name for cap in c.manifest.bindings)
    except Exception as exc:
        loaded.env_error = f"{type(exc).__name__}: {exc}"
        return
    templates = {t["id"]: t.get("args") for t in listed if isinstance(t, dict) and "id" in t}
    problems = {}
    for row in loaded.rows or ():
        problem = _schema_problem(name, templates, row)
        if problem is not None:
            problems[row["slug"]] = problem
    loaded.env = {
        "name": name,
        "version": version,
        "templates": sorted(templates),
        "capabilities": capabilities,
        "row_problems": problems,
    }
    loaded.notes.append("args checked by name against each template's published schema")


def _schema_problem(env: str, templates: dict[str, Any], row: dict[str, Any]) -> str | None:
    if row["env"] != env:
        return f"its environment {row['env']!r} is not the one served ({env!r})"
    if row["id"] not in templates:
        known = ", ".join(sorted(templates)) or "none"
        return f"no template {row['id']!r} in environment {env!r} (known: {known})"
    schema = templates[row["id"]]
    if not isinstance(schema, dict) or not isinstance(schema.get("properties"), dict):
        return None
    args = row.get("args") or {}
    unknown = [n for n in args if n not in schema["properties"]]
    if unknown and schema.get("additionalProperties") is False:
        return f"{row['id']}: unknown argument(s) {', '.join(map(repr, unknown))}"
    missing = [n for n in schema.get("required") or () if n not in args]
    if missing:
        return f"{row['id']}: missing argument(s) {', '.join(map(repr, missing))}"
    return None
