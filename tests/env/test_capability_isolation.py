"""Capabilities are reachable by their owner only: another local uid gets nothing from a
capability server or from a client's forwarder, directly or through the tunnel.

The stranger is a child running as `nobody` (uid 65534) that tries each URL with raw
sockets and reports what came back; the same probe as our own uid gets answers.
"""

from __future__ import annotations

import asyncio
import json
import os
import socket
import stat
import traceback
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any
from urllib.parse import unquote, urlsplit

import pytest
from mcp.server.mcpserver import MCPServer

from _support.daemons import echo_back
from proctor.channel import EnvClient, EnvServer, connect
from proctor.env import Capability, Environment, ShellClient

pytestmark = pytest.mark.skipif(os.geteuid() != 0, reason="switching to uid nobody needs root")

NOBODY = 65534
TOKEN = "isolation-token"

SHELL_ID = '{"id": 1, "command": "id -u"}\n'
HTTP_GET = "GET /mcp HTTP/1.1\r\nHost: localhost\r\nConnection: close\r\n\r\n"
PING = "ping\n"


def attempt(url: str, payload: str) -> dict[str, Any]:
    """Connect to a capability URL, send one request, read until a newline, EOF or 2 s."""
    scheme, _, rest = url.partition("://")
    try:
        if scheme == "unix" or scheme.endswith("+unix"):
            sock = socket.socket(socket.AF_UNIX)
            sock.connect(rest if scheme == "unix" else unquote(rest.split("/", 1)[0]))
        else:
            sock = socket.socket(socket.AF_INET)  # a numeric host: no lookup, no codec
            sock.settimeout(2)
            parts = urlsplit(url)
            sock.connect((parts.hostname, parts.port))
    except OSError as exc:
        return {"connected": False, "got": "", "error": type(exc).__name__}
    sock.settimeout(2)
    got, error = b"", None
    try:
        sock.sendall(payload.encode())
        while b"\n" not in got and (chunk := sock.recv(65536)):
            got += chunk
    except OSError as exc:
        error = type(exc).__name__
    sock.close()
    return {"connected": True, "got": got[:4096].decode(errors="replace"), "error": error}


async def probe(targets: list[tuple[str, str]], *, uid: int | None) -> list[dict[str, Any]]:
    """`attempt` each (url, payload) in a forked child running as `uid` (None: ours).

    The child only makes blocking socket calls and writes one JSON line to a pipe,
    never touching the parent's event loop.
    """
    read_end, write_end = os.pipe()
    pid = os.fork()
    if pid == 0:  # pragma: no cover - the child
        code = 1
        try:
            os.close(read_end)
            if uid is not None:
                os.setgroups([])
                os.setgid(uid)
                os.setuid(uid)
            answers = [attempt(url, payload) for url, payload in targets]
            os.write(write_end, json.dumps(answers).encode())
            code = 0
        except BaseException:
            os.write(write_end, traceback.format_exc().encode())
        finally:
            os._exit(code)
    os.close(write_end)
    try:
        _, status = await asyncio.wait_for(asyncio.to_thread(os.waitpid, pid, 0), 60)
        with os.fdopen(read_end, "rb") as pipe:
            out = pipe.read()
    except BaseException:
        os.kill(pid, 9)
        os.waitpid(pid, 0)  # noqa: ASYNC222 - killed: reaping it is immediate
        raise
    assert os.waitstatus_to_exitcode(status) == 0, out.decode(errors="replace")
    results: list[dict[str, Any]] = json.loads(out)
    return results


def build_env(echo_port: int) -> Environment:
    env = Environment("isolation")
    env.add_shell(timeout=10)
    notes = MCPServer("notes", log_level="WARNING")

    @notes.tool()
    def add(a: int, b: int) -> int:
        """Add two integers."""
        return a + b

    env.add_mcp(notes)
    # A user's own daemon on loopback TCP: a foreign, TCP-style capability.
    env.add_capability(Capability("echo", "echo/1", f"tcp://127.0.0.1:{echo_port}"))
    return env


@pytest.fixture
async def served() -> AsyncIterator[tuple[Environment, EnvClient]]:
    """An environment with a shell, an MCP server and a TCP echo, behind a token, and a
    client connected to it."""
    echo = await asyncio.start_server(echo_back, "127.0.0.1", 0)
    env = build_env(echo.sockets[0].getsockname()[1])
    server = EnvServer(env, token=TOKEN)
    await env.start()
    try:
        host, port = await server.listen()
        async with connect(f"tcp://{host}:{port}", token=TOKEN, ready_timeout=10) as client:
            yield env, client
    finally:
        await server.aclose()
        await env.stop()
        echo.close()
        await echo.wait_closed()


async def test_another_uid_reaches_no_capability_server_directly(
    served: tuple[Environment, EnvClient],
) -> None:
    env, _ = served
    targets = [
        (env.capability("shell").url, SHELL_ID),
        (env.capability("mcp").url, HTTP_GET),
    ]
    mine = await probe(targets, uid=None)
    assert json.loads(mine[0]["got"])["stdout"] == "0\n"  # our own uid runs commands
    assert mine[1]["got"].startswith("HTTP/1.1 ")
    for url, result in zip(targets, await probe(targets, uid=NOBODY), strict=True):
        assert result["got"] == "" and not result["connected"], (url, result)


async def test_another_uid_gets_nothing_through_the_forwarders(
    served: tuple[Environment, EnvClient],
) -> None:
    _, client = served
    targets = [
        (client.binding("shell").url, SHELL_ID),
        (client.binding("mcp").url, HTTP_GET),
        (client.binding("echo").url, PING),
    ]
    assert targets[0][0].startswith("unix:///")
    assert targets[1][0].startswith("http+unix://") and targets[1][0].endswith("/mcp")
    assert targets[2][0].startswith("tcp://127.0.0.1:")
    mine = await probe(targets, uid=None)
    assert json.loads(mine[0]["got"])["stdout"] == "0\n"
    assert mine[1]["got"].startswith("HTTP/1.1 ")
    assert mine[2]["got"] == PING
    for url, result in zip(targets, await probe(targets, uid=NOBODY), strict=True):
        assert result["got"] == "", (url, result)
    # The TCP forwarder still serves its owner after refusing the stranger.
    assert (await probe(targets[2:], uid=None))[0]["got"] == PING


async def test_forwarder_sockets_live_in_a_private_dir_removed_at_close(
    served: tuple[Environment, EnvClient],
) -> None:
    env, client = served
    shell = client.binding("shell")
    result = await ShellClient(shell.url).run("id -u")
    assert result.ok and result.stdout == "0\n"
    for name in ("shell", "mcp"):
        native = env.capability(name).url
        assert native != client.binding(name).url
    directory = Path(shell.url.removeprefix("unix://")).parent
    info = directory.stat()
    assert stat.S_IMODE(info.st_mode) == 0o700 and info.st_uid == os.geteuid()
    await client.aclose()
    assert not directory.exists()


async def test_the_capability_servers_remove_their_sockets_at_stop() -> None:
    env = build_env(9)
    await env.start()
    shell, mcp = env.capability("shell").url, env.capability("mcp").url
    sockets = [
        Path(shell.removeprefix("unix://")),
        Path(unquote(mcp.removeprefix("http+unix://").split("/", 1)[0])),
    ]
    for sock in sockets:
        assert stat.S_ISSOCK(sock.stat().st_mode)
        assert stat.S_IMODE(sock.parent.stat().st_mode) == 0o700
    await env.stop()
    assert not any(sock.parent.exists() for sock in sockets)
