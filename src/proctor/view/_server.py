"""`ViewServer`: the dashboard on proctor's own HTTP server, and `serve_view` for the CLI."""

from __future__ import annotations

import asyncio
import os
import signal
from collections.abc import Callable, Iterable

from .._http import HttpLimits, HttpServer
from .._resource import AsyncResource
from ._app import ViewApp
from ._data import discover

__all__ = ["LOOPBACK", "ViewServer", "serve_view"]

LOOPBACK = frozenset({"127.0.0.1", "::1", "localhost"})
# Pages and API answers are small and requests have no body: tight read limits.
_LIMITS = HttpLimits(
    max_connections=256,
    max_buffered=16 * 1024 * 1024,
    max_body=64 * 1024,
    head_timeout=10.0,
    body_timeout=10.0,
    idle_timeout=120.0,
)


class ViewServer(AsyncResource):
    """Serve the batches under `paths` (output dirs, or folders holding them).

    Off loopback a `token` is required. On loopback, requests must name the server by
    a loopback `Host` (a DNS-rebinding page cannot read it).

    Raises:
        ValueError: `host` is not loopback and there is no token.
        FileNotFoundError: a path is neither a batch nor a folder.
    """

    def __init__(
        self,
        paths: Iterable[str | os.PathLike[str]],
        *,
        host: str = "127.0.0.1",
        port: int = 0,
        token: str | None = None,
    ) -> None:
        if host not in LOOPBACK and not token:
            raise ValueError(f"serving on {host} needs a token (--token-env VAR)")
        roots = [os.fspath(p) for p in paths]  # rescanned: batches made later show up
        self.batches = discover(roots)
        self.app = ViewApp(
            self.batches, token=token, hosts=None if token else _hosts(host), roots=roots
        )
        self._http = HttpServer(
            self.app.handle, host=host, port=port, limits=_LIMITS, screen=self.app.screen
        )
        self._host_names = host

    @property
    def url(self) -> str:
        """`http://host:port/` (after `start`)."""
        return self._http.url + "/"

    async def start(self) -> None:
        """Bind and serve; the loopback `Host` values now include the bound port."""
        await self._http.start()
        if self.app.hosts is not None:
            self.app.hosts = _hosts(self._host_names, self._http.port)

    async def aclose(self) -> None:
        """End live streams, then stop the server."""
        self.app.closing.set()
        await self._http.aclose(grace=2.0)


def _hosts(host: str, port: int | None = None) -> frozenset[str]:
    names = {"127.0.0.1", "localhost", "[::1]"} if host in LOOPBACK else {host}
    if port is None:
        return frozenset(names)
    return frozenset(f"{n}:{port}" for n in names) | frozenset(names)


async def serve_view(server: ViewServer, ready: Callable[[str], None]) -> None:
    """Serve until SIGTERM or SIGINT; `ready(url)` is called once bound."""
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)
    try:
        async with server:
            ready(server.url)
            await stop.wait()
    finally:
        for sig in (signal.SIGTERM, signal.SIGINT):
            loop.remove_signal_handler(sig)
