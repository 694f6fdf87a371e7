"""What every capability server shares (`CapabilityServer`): a private folder and socket
while started, `url` only then, and a stop that ends the connections it holds.

The shell and user servers stand for the Unix-socket kind (the desktop and the browser
are covered in tests/computer); each is really started and dialled over its socket.
"""

from __future__ import annotations

import asyncio
import json
import os
import stat
from collections.abc import Callable, Sequence

import pytest

from proctor.env import Message, ShellServer, UserServer

SERVERS: list[Callable[[], ShellServer | UserServer]] = [ShellServer, UserServer]


@pytest.mark.parametrize("make", SERVERS, ids=["shell", "user"])
async def test_the_socket_lives_in_a_private_folder_only_while_started(
    make: Callable[[], ShellServer | UserServer],
) -> None:
    server = make()
    with pytest.raises(RuntimeError, match=f"{type(server).__name__} is not started"):
        _ = server.url
    async with server:
        path = server.url.removeprefix("unix://")
        assert os.path.basename(path) == f"{server.kind}.sock"
        folder = os.stat(os.path.dirname(path))
        assert stat.S_IMODE(folder.st_mode) == 0o700 and folder.st_uid == os.geteuid()
        assert stat.S_ISSOCK(os.stat(path).st_mode)
    with pytest.raises(FileNotFoundError):
        os.stat(os.path.dirname(path))
    with pytest.raises(RuntimeError, match="is not started"):
        _ = server.url


async def test_stopping_ends_an_idle_connection() -> None:
    server = ShellServer()
    await server.start()
    reader, writer = await asyncio.open_unix_connection(server.url.removeprefix("unix://"))
    try:
        writer.write(b'{"id": 1, "command": "echo hi"}\n')
        assert json.loads(await asyncio.wait_for(reader.readline(), 30))["stdout"] == "hi\n"
        await asyncio.wait_for(server.aclose(), 30)  # the connection is open, idle
        assert await asyncio.wait_for(reader.read(), 30) == b""
    finally:
        writer.close()


async def test_stopping_cancels_a_user_still_thinking() -> None:
    asked, cancelled = asyncio.Event(), asyncio.Event()

    async def user(messages: Sequence[Message]) -> str:
        asked.set()
        try:
            await asyncio.Event().wait()
        except asyncio.CancelledError:
            cancelled.set()
            raise
        return "never"

    server = UserServer()
    await server.start()
    dialogue = server.open(user)
    reader, writer = await asyncio.open_unix_connection(server.url.removeprefix("unix://"))
    try:
        writer.write(json.dumps({"dialogue": dialogue.id, "text": "hi"}).encode() + b"\n")
        await asyncio.wait_for(asked.wait(), 30)
        await asyncio.wait_for(server.aclose(), 30)
        assert cancelled.is_set()
        assert await asyncio.wait_for(reader.read(), 30) == b""  # no reply, closed
    finally:
        writer.close()
