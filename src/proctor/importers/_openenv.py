"""OpenEnv environments served as proctor environments: `reset` and `step` as MCP tools.

An OpenEnv environment (meta-pytorch OpenEnv, `openenv-core`) is a server speaking
reset/step over a WebSocket. `openenv_environment` wraps one in a proctor
`Environment`: its `openenv` capability is an MCP server with two tools, `reset` and
`step`, each a call of OpenEnv's own client (`GenericEnvClient`, actions and
observations as JSON objects). The `episode` template opens an episode (its own
WebSocket session), prompts with the action schema and the first observation, and
grades by the rewards the steps returned: their sum (default) or the last one.

Episodes run concurrently in one environment process: each publishes a key as its
`openenv` binding's `auth_token`, which `ToolAgent` sends as a bearer token with
every tool call, and the tools act on the episode that key names (a call without
one acts on the only episode in progress).
"""

from __future__ import annotations

import asyncio
import json
import os
import secrets
import sys
from collections.abc import AsyncGenerator
from pathlib import Path
from typing import Any

from ..env import Environment
from ..records import Task
from ._folder_files import read_text
from ._openenv_session import Aggregate, Episodes, OpenEnvServer, OpenEnvSession
from ._source import Source

__all__ = ["openenv_environment", "openenv_source"]

CAPABILITY = "openenv"
_PROMPT = (
    "You are acting in the OpenEnv environment {name!r} through its tools: `step` takes "
    "an action (a JSON object) and returns the observation, the reward and whether the "
    "episode is done; `reset` starts the episode over. Collect as much reward as you "
    "can, until the episode is done.\n\nAction schema:\n{schema}\n\nFirst observation:\n"
    "{observation}"
)


def openenv_environment(
    app: Any = None,
    *,
    base_url: str | None = None,
    name: str = "openenv",
    aggregate: Aggregate = "sum",
) -> Environment:
    """A proctor environment serving an OpenEnv environment through `reset`/`step` tools.

    Args:
        app: the OpenEnv app (`create_app(...)`) or `"module:attr"` naming it, served
            in the environment's process (uvicorn, 127.0.0.1, a free port).
        base_url: an OpenEnv server already running, instead of `app`.
        name: the environment's name (rows' `env`).
        aggregate: the grade: "sum" of the step rewards (default) or the "last" one.

    Raises:
        ValueError: neither or both of `app` and `base_url`, or a bad `aggregate`.
        ImportError: the `mcp` extra is not installed.
    """
    if aggregate not in ("sum", "last"):
        raise ValueError(f"aggregate must be 'sum' or 'last', not {aggregate!r}")
    server = OpenEnvServer(app, base_url)
    episodes = Episodes()
    env = Environment(name)
    env.initialize(server.start)
    env.shutdown(server.stop)
    env.add_mcp(_tools(episodes, name), name=CAPABILITY)

    @env.template(id="episode")
    async def episode(
        prompt: str | None = None, reset: dict[str, Any] | None = None
    ) -> AsyncGenerator[Any, Any]:
        """One OpenEnv episode, graded by the rewards its steps return."""
        assert server.base_url is not None  # set by start
        session, key = OpenEnvSession(server.base_url), secrets.token_urlsafe(16)
        try:
            await session.connect()
            episodes[key] = session
            first = await session.reset(**(reset or {}))
            schema = await asyncio.to_thread(server.schema)
            text = prompt or _PROMPT.format(
                name=name, schema=json.dumps(schema, indent=1), observation=json.dumps(first)
            )
            yield {"prompt": text, "bindings": {CAPABILITY: {"auth_token": key}}}
            yield session.grade(aggregate)
        finally:
            episodes.pop(key, None)
            await session.close()

    return env


def openenv_source(path: str | os.PathLike[str], *, aggregate: Aggregate = "sum") -> Source:
    """An OpenEnv environment folder (`openenv.yaml` naming its `app`, else
    `server.app:app` as OpenEnv's own tools default to) as one row.

    The app is imported in this process (as a module of the folder's package, or
    with the folder on `sys.path` as `openenv serve` runs it) and served by the
    environment.

    Raises:
        ValueError: `openenv.yaml` names no `app` and there is no `server/app.py`,
            or the manifest is not a regular file inside
            the folder (a symlink out of it, a FIFO, ...).
    """
    folder = Path(path).resolve()
    manifest = _manifest(folder / "openenv.yaml", folder)
    named = manifest.get("app")
    if not named and (folder / "server" / "app.py").is_file():
        named = _DEFAULT_APP  # an older manifest (name, action, observation only)
    if not named:
        raise ValueError(f"{folder / 'openenv.yaml'}: no `app: module:attr`, and no server/app.py")
    name = str(manifest.get("name") or folder.name)
    app = _app_path(folder, str(named))
    env = openenv_environment(app, name=name, aggregate=aggregate)
    return Source("openenv", [Task(env=name, id="episode", slug=name)], env)


_DEFAULT_APP = "server.app:app"  # openenv-core's uv provider and `openenv validate`


def _app_path(folder: Path, app: str) -> str:
    """`module:attr` importable here: within the folder's package when it can be one
    (so two environments' `server.app` do not collide), else from the folder."""
    package = folder.name.isidentifier() and (folder / "__init__.py").is_file()
    root = str(folder.parent if package else folder)
    if root not in sys.path:
        sys.path.insert(0, root)
    return f"{folder.name}.{app}" if package else app


def _tools(episodes: Episodes, name: str) -> Any:
    try:
        from ._openenv_tools import openenv_tools
    except ImportError as exc:
        raise ImportError("OpenEnv tools need `pip install 'proctor[mcp]'`") from exc
    return openenv_tools(episodes, name)


def _manifest(path: Path, folder: Path) -> dict[str, Any]:
    """The manifest, a regular file inside `folder` (`read_text`)."""
    import yaml  # type: ignore[import-untyped,import-not-found,unused-ignore]

    data = yaml.safe_load(read_text(path, folder))
    return data if isinstance(data, dict) else {}
