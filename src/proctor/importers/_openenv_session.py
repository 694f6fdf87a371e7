"""OpenEnv servers, and one episode's client and rewards."""

from __future__ import annotations

import json
import logging
import math
import socket
import urllib.request
from typing import Any, Literal

from ..records import Grade

__all__ = ["Aggregate", "Episodes", "OpenEnvServer", "OpenEnvSession"]

Aggregate = Literal["sum", "last"]
_IMPORT = "OpenEnv needs `pip install 'proctor[openenv]'`"
# `# type: ignore` on openenv imports: it ships no type information.


class OpenEnvServer:
    """Where an OpenEnv environment answers: an app served here, or a running server.

    Args:
        app: an OpenEnv ASGI app (`create_app(...)`) or `"module:attr"` naming one,
            served in this process by uvicorn on 127.0.0.1 and a free port, which
            answers only connections of this process's uid (a loopback port is open to
            every local user: another one gets 403).
        base_url: the URL of an OpenEnv server already running (when `app` is None).

    Raises:
        ValueError: neither or both of `app` and `base_url`.
    """

    def __init__(self, app: Any = None, base_url: str | None = None) -> None:
        if (app is None) == (base_url is None):
            raise ValueError("OpenEnv: pass an app or a base_url (one of them)")
        self.app = app
        self.base_url = base_url
        self._server: Any = None
        self._sock: socket.socket | None = None

    async def start(self) -> None:
        """Serve the app, if any.

        Raises:
            RuntimeError: the app's lifespan failed.
        """
        if self.app is None:
            return
        import uvicorn

        logging.getLogger("uvicorn.error").addFilter(_quiet_disconnects)
        config = uvicorn.Config(
            _owner_only(_load_app(self.app)), log_level="warning", lifespan="on"
        )
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
        self.base_url = f"http://127.0.0.1:{sock.getsockname()[1]}"

    async def stop(self) -> None:
        """Stop the app's server (a running one is left alone)."""
        server, sock = self._server, self._sock
        self._server = self._sock = None
        if server is not None and sock is not None:
            try:
                await server.shutdown(sockets=[sock])
            finally:
                sock.close()

    def schema(self) -> Any:
        """The environment's action schema (`GET /schema`), or None if it has none."""
        url = f"{(self.base_url or '').rstrip('/')}/schema"
        try:
            with urllib.request.urlopen(url, timeout=30) as response:
                data = json.loads(response.read())
        except (OSError, ValueError):
            return None
        return data.get("action", data) if isinstance(data, dict) else data


class OpenEnvSession:
    """One episode: OpenEnv's own client on its WebSocket, and the rewards of its steps."""

    def __init__(self, base_url: str) -> None:
        self.base_url = base_url
        self.rewards: list[float] = []
        self.done = False
        self._client: Any = None

    async def connect(self) -> None:
        """Open the client's WebSocket.

        Raises:
            ImportError: `openenv-core` is not installed.
            ConnectionError: the server does not answer.
        """
        try:
            from openenv.core.generic_client import GenericEnvClient  # type: ignore[import-untyped,import-not-found,unused-ignore]
        except ImportError as exc:
            raise ImportError(_IMPORT) from exc
        self._client = GenericEnvClient(base_url=self.base_url)
        await self._client.connect()

    async def close(self) -> None:
        """Close the client's WebSocket."""
        client, self._client = self._client, None
        if client is not None:
            await client.close()

    async def reset(self, **options: Any) -> dict[str, Any]:
        """Start the episode (options such as `seed` go to the environment's reset)."""
        result = await self._client.reset(**options)
        self.rewards, self.done = [], bool(result.done)
        return _result(result)

    async def step(self, action: dict[str, Any]) -> dict[str, Any]:
        """Act once; the reward joins the episode's."""
        result = await self._client.step(action)
        self.rewards.append(float(result.reward or 0.0))
        self.done = bool(result.done)
        return _result(result)

    def grade(self, aggregate: Aggregate) -> Grade:
        """The episode's reward: the sum of its step rewards, or the last one."""
        if aggregate == "sum":
            reward = math.fsum(self.rewards)
        else:
            reward = self.rewards[-1] if self.rewards else 0.0
        info = {"rewards": list(self.rewards), "steps": len(self.rewards), "done": self.done}
        return Grade(reward=reward, info=info)


class Episodes(dict[str, OpenEnvSession]):
    """The episodes in progress, by key (the bearer token their tool calls carry)."""

    def find(self, key: str | None) -> OpenEnvSession:
        """The episode `key` names; without a key, the only one in progress.

        Raises:
            LookupError: no such episode (or no key while several are in progress).
        """
        if key is not None and key in self:
            return self[key]
        if key is None and len(self) == 1:
            return next(iter(self.values()))
        raise LookupError("no OpenEnv episode in progress for this call")


def _quiet_disconnects(record: logging.LogRecord) -> bool:
    """Drop OpenEnv's server's report of a client gone before its close (not an error)."""
    exc = record.exc_info[1] if record.exc_info else None
    return type(exc).__name__ not in ("WebSocketDisconnect", "ClientDisconnected")


def _load_app(app: Any) -> Any:
    if not isinstance(app, str):
        return app
    import importlib

    module, _, attr = app.partition(":")
    return getattr(importlib.import_module(module), attr or "app")


def _result(result: Any) -> dict[str, Any]:
    return {"observation": result.observation, "reward": result.reward, "done": result.done}


def _owner_only(app: Any) -> Any:
    """`app`, refusing HTTP and WebSocket connections from any uid but ours (looked up
    in /proc/net/tcp, as the capability forwarders do)."""
    import os

    from .._peer import loopback_peer_uid

    uid = os.getuid()

    async def guarded(scope: dict[str, Any], receive: Any, send: Any) -> None:
        if scope["type"] in ("http", "websocket"):
            server, client = scope.get("server"), scope.get("client")
            peer = None if not (server and client) else loopback_peer_uid(server, client)
            if peer != uid:
                await _refuse(scope["type"], send)
                return
        await app(scope, receive, send)

    return guarded


async def _refuse(kind: str, send: Any) -> None:
    if kind == "websocket":  # closed before the accept: the client sees HTTP 403
        await send({"type": "websocket.close", "code": 1008})
        return
    await send({"type": "http.response.start", "status": 403, "headers": []})
    await send({"type": "http.response.body", "body": b"forbidden: not this server's user"})
