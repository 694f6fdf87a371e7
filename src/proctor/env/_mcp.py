"""Serve an MCP server (the `mcp` SDK) over streamable HTTP on a private Unix socket."""

from __future__ import annotations

import os
import socket
from typing import Any

from .._urls import http_unix_url
from ._capability_server import CapabilityServer

__all__ = ["McpHttpServer"]


class McpHttpServer(CapabilityServer):
    """Serve `server` (an `mcp` `MCPServer` or low-level `Server`) at `http+unix://.../path`.

    The socket lives in a fresh directory only this process's uid may enter, created by
    `start` and removed by `aclose`; the tunnel reaches it from the environment server.
    No browser can reach a Unix socket, so the SDK's DNS-rebinding (Host header) check is
    off: clients send `Host: localhost`. uvicorn runs inside this event loop without
    touching signal handlers, so the environment's own SIGTERM handling stays in charge.

    Args:
        server: anything with `streamable_http_app(streamable_http_path=...,
            transport_security=...)`.
        path: the endpoint path.
    """

    kind = "mcp"

    def __init__(self, server: Any, *, path: str = "/mcp"):
        super().__init__()
        self.server = server
        self.path = path
        self._uvicorn: Any = None
        self._sock: socket.socket | None = None

    def _where(self) -> str | None:
        """`http+unix://<percent-encoded socket path>/path` once started."""
        return None if self._sock is None else http_unix_url(self._sock.getsockname(), self.path)

    async def start(self) -> str:
        """Make the private directory, bind its socket and serve; returns the URL.

        Raises:
            ImportError: the `mcp` extra is not installed.
            OSError: the directory or the socket could not be made.
            RuntimeError: the app's lifespan failed to start.
        """
        try:
            import uvicorn
            from mcp.server.transport_security import TransportSecuritySettings
        except ImportError as exc:
            raise ImportError("serving MCP needs `pip install 'proctor[mcp]'`") from exc
        app = self.server.streamable_http_app(
            streamable_http_path=self.path,
            transport_security=TransportSecuritySettings(enable_dns_rebinding_protection=False),
        )
        config = uvicorn.Config(
            app, log_level="warning", lifespan="on", timeout_graceful_shutdown=1
        )
        config.load()
        self._uvicorn = uvicorn.Server(config)
        # What `Server.serve()` does before `startup()`, minus its signal capture.
        self._uvicorn.lifespan = config.lifespan_class(config)
        directory = self._make_dir()
        sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        try:
            sock.bind(os.path.join(directory, "mcp.sock"))
            await self._uvicorn.startup(sockets=[sock])
        except BaseException as exc:
            sock.close()
            self._remove_dir()
            if isinstance(exc, SystemExit):  # uvicorn exits the process when the lifespan fails
                raise RuntimeError(f"MCP server {self.path} failed to start") from None
            raise
        self._sock = sock
        return self.url

    async def aclose(self) -> None:
        """Stop serving (in-flight requests get a second to finish), remove the directory."""
        server, sock = self._uvicorn, self._sock
        self._uvicorn = self._sock = None
        try:
            if server is not None and sock is not None:
                await server.shutdown(sockets=[sock])
        finally:
            self._remove_dir()
