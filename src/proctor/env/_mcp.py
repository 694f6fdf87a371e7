"""Serve an MCP server (the `mcp` SDK) over streamable HTTP on a loopback port."""

from __future__ import annotations

import socket
from typing import Any

__all__ = ["McpHttpServer"]


class McpHttpServer:
    """Serve `server` (an `mcp` `MCPServer` or low-level `Server`) at `http://host:port/path`.

    uvicorn runs inside this event loop without touching signal handlers, so the
    environment's own SIGTERM handling stays in charge.

    Args:
        server: anything with `streamable_http_app(streamable_http_path=...)`.
        path: the endpoint path.
        host: address to bind; loopback, the tunnel reaches it from there.
        port: port to bind (0 picks a free one).
    """

    def __init__(self, server: Any, *, path: str = "/mcp", host: str = "127.0.0.1", port: int = 0):
        self.server = server
        self.path = path
        self.host = host
        self.port = port
        self._uvicorn: Any = None
        self._sock: socket.socket | None = None

    @property
    def url(self) -> str:
        """`http://host:port/path` once started.

        Raises:
            RuntimeError: not started.
        """
        if self._sock is None:
            raise RuntimeError("McpHttpServer is not started")
        host, port = self._sock.getsockname()[:2]
        return f"http://{host}:{port}{self.path}"

    async def start(self) -> str:
        """Bind and serve; returns the URL.

        Raises:
            ImportError: the `mcp` extra is not installed.
            RuntimeError: the app's lifespan failed to start.
        """
        try:
            import uvicorn
        except ImportError as exc:
            raise ImportError("serving MCP needs `pip install 'proctor[mcp]'`") from exc
        app = self.server.streamable_http_app(streamable_http_path=self.path)
        config = uvicorn.Config(
            app, log_level="warning", lifespan="on", timeout_graceful_shutdown=1
        )
        config.load()
        self._uvicorn = uvicorn.Server(config)
        # What `Server.serve()` does before `startup()`, minus its signal capture.
        self._uvicorn.lifespan = config.lifespan_class(config)
        sock = socket.create_server((self.host, self.port))
        try:
            await self._uvicorn.startup(sockets=[sock])
        except SystemExit:  # uvicorn exits the process when the lifespan fails
            sock.close()
            raise RuntimeError(f"MCP server {self.path} failed to start") from None
        self._sock = sock
        return self.url

    async def aclose(self) -> None:
        """Stop serving (in-flight requests get a second to finish)."""
        server, sock = self._uvicorn, self._sock
        self._uvicorn = self._sock = None
        if server is not None and sock is not None:
            await server.shutdown(sockets=[sock])
