"""`check_env_server`: our servers speak control channel v1; a broken one is caught."""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator

import pytest

from proctor import EnvServer
from proctor.testing import check_env_server, conformance_env


@pytest.fixture
async def in_process() -> AsyncIterator[EnvServer]:
    env = conformance_env.env
    await env.start()
    server = EnvServer(env, token="s3cret")
    try:
        yield server
    finally:
        await server.aclose()
        await env.stop()


async def test_a_served_child_passes(served_url: str) -> None:
    await check_env_server(served_url)


async def test_an_in_process_server_with_a_token_passes(in_process: EnvServer) -> None:
    host, port = await in_process.listen("127.0.0.1", 0)
    await check_env_server(f"tcp://{host}:{port}", token="s3cret")


async def test_a_missing_token_is_reported(in_process: EnvServer) -> None:
    host, port = await in_process.listen("127.0.0.1", 0)
    with pytest.raises(AssertionError, match=r"\[hello\]: hello answered an error: .*token"):
        await check_env_server(f"tcp://{host}:{port}")


async def test_nothing_listening_is_reported() -> None:
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    with pytest.raises(AssertionError, match=r"\[hello\]: ConnectionRefusedError"):
        await check_env_server(f"tcp://127.0.0.1:{port}", timeout=2)


async def test_a_server_that_breaks_the_protocol_is_caught() -> None:
    async def sloppy(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        while line := await reader.readline():
            msg = json.loads(line)
            reply = {"jsonrpc": "2.0", "id": msg.get("id"), "result": {"session_id": 7}}
            writer.write(json.dumps(reply).encode() + b"\n")
        writer.close()

    server = await asyncio.start_server(sloppy, "127.0.0.1", 0)
    async with server:
        port = server.sockets[0].getsockname()[1]
        with pytest.raises(AssertionError, match=r"\[hello\]: session_id 7"):
            await check_env_server(f"tcp://127.0.0.1:{port}", timeout=2)
