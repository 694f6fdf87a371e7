"""OpenEnv environments served as proctor environments: `reset` and `step` as MCP tools.

An OpenEnv environment (meta-pytorch OpenEnv, `openenv-core`) is a server speaking
reset/step over a WebSocket. `openenv_environment` wraps one in a proctor
`Environment`: its `openenv` capability is an MCP server with two tools, `reset` and
`step`, each a call of OpenEnv's own client (`GenericEnvClient`, actions and
observations as JSON objects). The `episode` template resets the environment, prompts
with the action schema and the first observation, and grades by the rewards the
steps returned: their sum (default) or the last one.

The OpenEnv server is either an app served in the environment's own process (uvicorn
on 127.0.0.1, a free port) or one already running (`base_url`: a container, a Space,
a child process). One episode runs at a time per environment process: serve it with
a runtime that starts a process per rollout (subprocess, sandbox, container) to run
several at once.
"""

from __future__ import annotations

import asyncio
import importlib
import json
import logging
import math
import os
import socket
import sys
import urllib.request
from collections.abc import AsyncGenerator
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal

from ..env._environment import Environment
from ..records._records import Grade
from ..records._task import Task

if TYPE_CHECKING:
    from ._source import Source

__all__ = ["OpenEnvSession", "openenv_environment", "openenv_source"]

Aggregate = Literal["sum", "last"]
_PROMPT = (
    "You are acting in the OpenEnv environment {name!r} through its tools: `step` takes "
    "an action (a JSON object) and returns the observation, the reward and whether the "
    "episode is done; `reset` starts the episode over. Collect as much reward as you "
    "can, until the episode is done.\n\nAction schema:\n{schema}\n\nFirst observation:\n"
    "{observation}"
)


class OpenEnvSession:
    """One OpenEnv server, its client, and the rewards of the current episode.

    Args:
        app: an OpenEnv ASGI app (or `"module:attr"`) to serve in this process, or None.
        base_url: the URL of an OpenEnv server already running (when `app` is None).
    """

    def __init__(self, app: Any = None, base_url: str | None = None) -> None:
        if (app is None) == (base_url is None):
            raise ValueError("OpenEnv: pass an app or a base_url (one of them)")
        self.app = app
        self.base_url = base_url
        self.rewards: list[float] = []
        self.done = False
        self._client: Any = None
        self._server: Any = None
        self._sock: socket.socket | None = None

    async def start(self) -> None:
        """Serve the app (if any) and connect the client.

        Raises:
            ImportError: `openenv-core` is not installed.
            ConnectionError: the server does not answer.
        """
        try:
            from openenv.core.generic_client import GenericEnvClient  # type: ignore[import-untyped,import-not-found,unused-ignore]
        except ImportError as exc:
            raise ImportError("OpenEnv needs `pip install 'proctor[openenv]'`") from exc
        if self.app is not None:
            self.base_url = await self._serve(_load_app(self.app))
        self._client = GenericEnvClient(base_url=self.base_url)
        await self._client.connect()

    async def stop(self) -> None:
        """Close the client and stop the app's server."""
        client, server, sock = self._client, self._server, self._sock
        self._client = self._server = self._sock = None
        try:
            if client is not None:
                await client.close()
        finally:
            if server is not None and sock is not None:
                await server.shutdown(sockets=[sock])
                sock.close()

    async def reset(self, **options: Any) -> dict[str, Any]:
        """Start an episode (options such as `seed` go to the environment's reset)."""
        result = await self._client.reset(**options)
        self.rewards, self.done = [], bool(result.done)
        return _result(result)

    async def step(self, action: dict[str, Any]) -> dict[str, Any]:
        """Act once; the reward joins the episode's."""
        result = await self._client.step(action)
        self.rewards.append(float(result.reward or 0.0))
        self.done = bool(result.done)
        return _result(result)

    def schema(self) -> Any:
        """The environment's action schema (`GET /schema`), or None if it has none."""
        url = f"{(self.base_url or '').rstrip('/')}/schema"
        try:
            with urllib.request.urlopen(url, timeout=30) as response:
                data = json.loads(response.read())
        except (OSError, ValueError):
            return None
        return data.get("action", data) if isinstance(data, dict) else data

    def grade(self, aggregate: Aggregate) -> Grade:
        """The episode's reward: the sum of its step rewards, or the last one."""
        if aggregate == "sum":
            reward = math.fsum(self.rewards)
        else:
            reward = self.rewards[-1] if self.rewards else 0.0
        info = {"rewards": list(self.rewards), "steps": len(self.rewards), "done": self.done}
        return Grade(reward=reward, info=info)

    async def _serve(self, app: Any) -> str:
        import uvicorn

        logging.getLogger("uvicorn.error").addFilter(_quiet_disconnects)
        config = uvicorn.Config(app, log_level="critical", lifespan="on")
        config.load()
        server = uvicorn.Server(config)
        # What `Server.serve()` does before `startup()`, minus its signal capture.
        server.lifespan = config.lifespan_class(config)
        sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        try:
            sock.bind(("127.0.0.1", 0))
            await server.startup(sockets=[sock])
        except SystemExit:  # uvicorn exits the process when the lifespan fails
            sock.close()
            raise RuntimeError("the OpenEnv app failed to start") from None
        except BaseException:
            sock.close()
            raise
        self._server, self._sock = server, sock
        return f"http://127.0.0.1:{sock.getsockname()[1]}"


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
            in the environment's process.
        base_url: an OpenEnv server already running, instead of `app`.
        name: the environment's name (rows' `env`).
        aggregate: the grade: "sum" of the step rewards (default) or the "last" one.

    Raises:
        ValueError: neither or both of `app` and `base_url`, or a bad `aggregate`.
        ImportError: the `mcp` extra is not installed.
    """
    if aggregate not in ("sum", "last"):
        raise ValueError(f"aggregate must be 'sum' or 'last', not {aggregate!r}")
    session = OpenEnvSession(app, base_url)
    env = Environment(name)
    env.initialize(session.start)
    env.shutdown(session.stop)
    env.add_mcp(_tools(session, name), name="openenv")

    @env.template(id="episode")
    async def episode(
        prompt: str | None = None, reset: dict[str, Any] | None = None
    ) -> AsyncGenerator[Any, Any]:
        """One OpenEnv episode, graded by the rewards its steps return."""
        first = await session.reset(**(reset or {}))
        schema = await asyncio.to_thread(session.schema)
        yield prompt or _PROMPT.format(
            name=name, schema=json.dumps(schema, indent=1), observation=json.dumps(first)
        )
        yield session.grade(aggregate)

    return env


def openenv_source(path: str | os.PathLike[str], *, aggregate: Aggregate = "sum") -> Source:
    """An OpenEnv environment folder (`openenv.yaml` naming its `app`) as one row.

    The app is imported in this process (as a module of the folder's package, or
    with the folder on `sys.path` as `openenv serve` runs it) and served by the
    environment.

    Raises:
        ValueError: `openenv.yaml` names no `app`.
    """
    from ._source import Source

    folder = Path(path).resolve()
    manifest = _manifest(folder / "openenv.yaml")
    if not manifest.get("app"):
        raise ValueError(f"{folder / 'openenv.yaml'}: no `app: module:attr`")
    name = str(manifest.get("name") or folder.name)
    env = openenv_environment(
        _app_path(folder, str(manifest["app"])), name=name, aggregate=aggregate
    )
    return Source("openenv", [Task(env=name, id="episode", slug=name)], env)


def _app_path(folder: Path, app: str) -> str:
    """`module:attr` importable here: within the folder's package when it can be one
    (so two environments' `server.app` do not collide), else from the folder."""
    package = folder.name.isidentifier() and (folder / "__init__.py").is_file()
    root = str(folder.parent if package else folder)
    if root not in sys.path:
        sys.path.insert(0, root)
    return f"{folder.name}.{app}" if package else app


def _tools(session: OpenEnvSession, name: str) -> Any:
    """The MCP server of the two tools."""
    try:
        from mcp.server.mcpserver import MCPServer
    except ImportError as exc:
        raise ImportError("OpenEnv tools need `pip install 'proctor[mcp]'`") from exc
    server = MCPServer(f"openenv-{name}", log_level="WARNING")

    @server.tool()
    async def reset(options: dict[str, Any] | None = None) -> dict[str, Any]:
        """Start the episode over (options such as seed); returns the first observation."""
        return await session.reset(**(options or {}))

    @server.tool()
    async def step(action: dict[str, Any]) -> dict[str, Any]:
        """Take one action (a JSON object); returns observation, reward and done."""
        return await session.step(action)

    return server


def _quiet_disconnects(record: logging.LogRecord) -> bool:
    """Drop OpenEnv's server's report of a client gone before its close (not an error)."""
    exc = record.exc_info[1] if record.exc_info else None
    return type(exc).__name__ not in ("WebSocketDisconnect", "ClientDisconnected")


def _load_app(app: Any) -> Any:
    if not isinstance(app, str):
        return app
    module, _, attr = app.partition(":")
    return getattr(importlib.import_module(module), attr or "app")


def _result(result: Any) -> dict[str, Any]:
    return {"observation": result.observation, "reward": result.reward, "done": result.done}


def _manifest(path: Path) -> dict[str, Any]:
    import yaml  # type: ignore[import-untyped,import-not-found,unused-ignore]

    data = yaml.safe_load(path.read_text())
    return data if isinstance(data, dict) else {}
