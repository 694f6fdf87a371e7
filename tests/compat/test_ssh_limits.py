"""What a client can make the compat layer's SSH daemon (`Workspace`) hold: connections
that never log in, and sessions on one connection. A real asyncssh daemon on 127.0.0.1,
raw TCP clients for the flood, an asyncssh client with the published key to log in."""

from __future__ import annotations

import asyncio
import os
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import asyncssh
import pytest

from _support.waiting import until
from proctor.compat._workspace_gate import MAX_PENDING, MAX_SESSIONS
from proctor.compat.hud.environment import Workspace

FLOOD = 3 * MAX_PENDING


@pytest.fixture
async def workspace(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> AsyncIterator[Workspace]:
    # A login window longer than any wait here: only the cap can close a connection.
    monkeypatch.setattr("proctor.compat._workspace._LOGIN_TIMEOUT", 600.0)
    ws = Workspace(tmp_path / "ws")
    await ws.start()
    try:
        yield ws
    finally:
        await ws.stop()


def _port(ws: Workspace) -> int:
    return int(ws.capability().url.rsplit(":", 1)[1])


async def _login(ws: Workspace) -> asyncssh.SSHClientConnection:
    params = ws.capability().params
    return await asyncssh.connect(
        "127.0.0.1",
        _port(ws),
        username=params["user"],
        client_keys=[asyncssh.import_private_key(params["client_key"])],
        known_hosts=([asyncssh.import_public_key(params["host_pubkey"])], [], []),
    )


def _fds() -> int:
    return len(os.listdir("/proc/self/fd"))


async def test_connections_that_do_not_log_in_are_capped(workspace: Workspace) -> None:
    before = _fds()
    flood: list[tuple[asyncio.StreamReader, asyncio.StreamWriter]] = []
    try:
        for _ in range(FLOOD):
            reader, writer = await asyncio.open_connection("127.0.0.1", _port(workspace))
            assert (await reader.readline()).startswith(b"SSH-2.0-")  # greeted, then silence
            flood.append((reader, writer))
        # The oldest beyond the cap were closed by the daemon: they read EOF.
        await until(
            lambda: sum(r.at_eof() for r, _ in flood) >= FLOOD - MAX_PENDING,
            f"the daemon closed all but {MAX_PENDING} of {FLOOD} idle connections",
        )
        # Our client ends of the flood, plus the daemon's ends it still holds.
        assert _fds() - before <= FLOOD + MAX_PENDING + 8
        conn = await _login(workspace)  # a client that logs in still gets in
        async with conn:
            result = await conn.run("echo in", check=True)
            assert result.stdout == "in\n"
    finally:
        for _, writer in flood:
            writer.close()


async def test_sessions_per_connection_are_capped(workspace: Workspace) -> None:
    async with await _login(workspace) as conn:
        held: list[Any] = [await conn.create_process("cat") for _ in range(MAX_SESSIONS)]
        with pytest.raises(asyncssh.ChannelOpenError, match="sessions per connection"):
            await conn.create_process("cat")
        first = held.pop(0)
        first.stdin.write_eof()
        await first.wait()
        await first.wait_closed()

        async def room() -> bool:  # the closed session's place is given back
            try:
                held.append(await conn.create_process("cat"))
            except asyncssh.ChannelOpenError:
                return False
            return True

        await until(room, "a session opened again once one closed")
        for proc in held:
            proc.stdin.write_eof()
            await proc.wait()


async def test_stop_ends_running_sessions_and_reaps_their_processes(tmp_path: Path) -> None:
    # Found in CI: a session still waiting for its killed command when the loop closed
    # left the child's transport open (a ResourceWarning in whichever test ran next).
    ws = Workspace(tmp_path / "ws")
    await ws.start()
    conn = await _login(ws)
    try:
        proc = await conn.create_process("echo $$ > pid; exec sleep 600")
        pid_file = tmp_path / "ws" / "pid"
        await until(lambda: bool(pid_file.exists() and pid_file.read_text().strip()), "it started")
        pid = int(pid_file.read_text())
        await ws.stop()  # returns only once the session's process is reaped
        assert _gone(pid)
        proc.close()
    finally:
        conn.close()
        await conn.wait_closed()


def _gone(pid: int) -> bool:
    return not Path(f"/proc/{pid}").exists()
