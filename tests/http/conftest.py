"""Fixtures for the HTTP tests: servers on 127.0.0.1 port 0, closed after each test.

Their types, and the raw client, live in `http_helpers`.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

import pytest
from http_helpers import Dial, Raw, Serve

from proctor._http import Handler, HttpServer


@pytest.fixture
async def serve() -> AsyncIterator[Serve]:
    """Start an `HttpServer` for a handler; every one started is closed at teardown."""
    servers: list[HttpServer] = []

    async def start(handler: Handler, **options: Any) -> HttpServer:
        server = HttpServer(handler, **options)
        await server.start()
        servers.append(server)
        return server

    yield start
    for server in servers:
        await server.aclose(grace=1.0)


@pytest.fixture
async def dial() -> AsyncIterator[Dial]:
    """Open raw connections to a server; every one is closed at teardown."""
    opened: list[Raw] = []

    async def open_(server: HttpServer) -> Raw:
        raw = await Raw.open(server.port)
        opened.append(raw)
        return raw

    yield open_
    for raw in opened:
        await raw.close()
