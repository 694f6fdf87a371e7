"""Another local uid cannot talk to an environment's simulated users: the user/1 socket
lives in a 0700 directory, so a stranger (uid `nobody`) cannot even connect, while
the same request from our own uid is answered."""

from __future__ import annotations

import asyncio
import json
import os
import socket
from collections.abc import AsyncIterator

import pytest

from proctor.env import UserServer, scripted

pytestmark = pytest.mark.skipif(os.geteuid() != 0, reason="switching to uid nobody needs root")

NOBODY = 65534


def _ask(path: str, request: bytes) -> str:
    """One request on the socket: the reply line, or the error that stopped it."""
    try:
        with socket.socket(socket.AF_UNIX) as sock:
            sock.settimeout(5)
            sock.connect(path)
            sock.sendall(request)
            return sock.makefile("rb").readline().decode()
    except OSError as exc:
        return type(exc).__name__


async def _ask_as(uid: int | None, path: str, request: bytes) -> str:
    """`_ask` in a forked child running as `uid` (None: ours)."""
    read_end, write_end = os.pipe()
    pid = os.fork()
    if pid == 0:  # pragma: no cover - the child
        try:
            os.close(read_end)
            if uid is not None:
                os.setgroups([])
                os.setgid(uid)
                os.setuid(uid)
            os.write(write_end, _ask(path, request).encode())
        finally:
            os._exit(0)
    os.close(write_end)
    try:
        await asyncio.wait_for(asyncio.to_thread(os.waitpid, pid, 0), 60)
    except BaseException:
        os.kill(pid, 9)
        os.waitpid(pid, 0)  # noqa: ASYNC222 - killed: reaping it is immediate
        raise
    with os.fdopen(read_end, "rb") as pipe:
        return pipe.read().decode()


@pytest.fixture
async def users() -> AsyncIterator[UserServer]:
    server = UserServer()
    await server.start()
    try:
        yield server
    finally:
        await server.aclose()


async def test_a_stranger_cannot_reach_the_user(users: UserServer) -> None:
    dialogue = users.open(scripted(["my secret order is 4417"]))
    path = users.url.removeprefix("unix://")
    request = json.dumps({"dialogue": dialogue.id, "text": "hi"}).encode() + b"\n"
    assert await _ask_as(NOBODY, path, request) == "PermissionError"
    assert dialogue.messages == []
    assert json.loads(await _ask_as(None, path, request)) == {"reply": "my secret order is 4417"}
