"""Shared wire fixtures: a real environment, a real server on loopback, raw sockets.

Every test here also checks that nothing was logged at ERROR level (DESIGN 3: no
traceback escapes to the log for a client's mistake); a test that provokes an
environment bug on purpose clears `caplog` after asserting on it. The helpers the
tests import live in `wire_helpers`.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any

import pytest
from wire_helpers import TIMEOUT, Probe, Raw, build_env

from proctor.channel import EnvServer
from proctor.env import Capability, Environment


@pytest.fixture(autouse=True)
def _no_error_logs(caplog: pytest.LogCaptureFixture) -> Any:
    caplog.set_level(logging.INFO)
    yield
    bad = [
        r
        for when in ("setup", "call")
        for r in caplog.get_records(when)
        if r.levelno >= logging.ERROR
    ]
    assert not bad, [r.getMessage() for r in bad]


@pytest.fixture
def probe() -> Probe:
    return Probe()


@pytest.fixture
async def echo() -> AsyncIterator[tuple[str, int]]:
    """A loopback echo daemon: writes back what it reads, then half-closes on EOF."""
    writers: list[asyncio.StreamWriter] = []

    async def handle(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        writers.append(writer)
        try:
            while data := await reader.read(65536):
                writer.write(data)
                await writer.drain()
            writer.write_eof()
            await writer.drain()
            await reader.read()  # wait for the far side to go away
        except ConnectionError:
            pass
        finally:
            writer.close()

    daemon = await asyncio.start_server(handle, "127.0.0.1", 0)
    yield daemon.sockets[0].getsockname()[:2]
    daemon.close()
    for w in writers:
        w.close()
    await daemon.wait_closed()


@pytest.fixture
def env(probe: Probe, echo: tuple[str, int]) -> Environment:
    host, port = echo
    return build_env(probe, [Capability("echo", "tcp", f"tcp://{host}:{port}", {"x": 1})])


@pytest.fixture
async def server(env: Environment) -> AsyncIterator[EnvServer]:
    srv = EnvServer(env)
    yield srv
    await srv.aclose()


@pytest.fixture
async def addr(server: EnvServer) -> tuple[str, int]:
    return await server.tcp_address()


@pytest.fixture
async def raw(addr: tuple[str, int]) -> AsyncIterator[Callable[[], Awaitable[Raw]]]:
    """Open raw connections to the server; all are closed at teardown."""
    opened: list[Raw] = []

    async def open_raw() -> Raw:
        conn = Raw(*await asyncio.open_connection(*addr))
        opened.append(conn)
        return conn

    yield open_raw
    for conn in opened:
        conn.close()


@pytest.fixture
async def fake() -> AsyncIterator[Callable[[Callable[[bytes], bytes | None]], Awaitable[str]]]:
    """A raw server that answers each line with whatever `reply(line)` says."""
    servers: list[asyncio.Server] = []
    writers: list[asyncio.StreamWriter] = []
    handlers: list[asyncio.Future[None]] = []

    async def start(reply: Callable[[bytes], bytes | None]) -> str:
        async def handle(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
            writers.append(writer)
            done = asyncio.get_running_loop().create_future()
            handlers.append(done)
            try:
                while line := await reader.readline():
                    answer = reply(line)
                    if answer is not None:
                        writer.write(answer)
            except ConnectionError:
                pass
            finally:
                done.set_result(None)

        srv = await asyncio.start_server(handle, "127.0.0.1", 0)
        servers.append(srv)
        host, port = srv.sockets[0].getsockname()[:2]
        return f"tcp://{host}:{port}"

    yield start
    for w in writers:
        w.close()
    await asyncio.wait_for(asyncio.gather(*handlers), TIMEOUT)  # every handler saw its EOF
    for srv in servers:
        srv.close()
        await srv.wait_closed()
