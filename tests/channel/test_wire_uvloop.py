"""The same wire on uvloop, whose transports are not asyncio.Transport subclasses."""

from __future__ import annotations

import asyncio

import pytest
from wire_helpers import TIMEOUT, Probe, build_env

from proctor.channel import EnvServer, connect
from proctor.env import Capability

uvloop = pytest.importorskip("uvloop")


async def rollout_with_a_tunnel() -> None:
    async def echo(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        writer.write(await reader.read())
        writer.close()

    daemon = await asyncio.start_server(echo, "127.0.0.1", 0)
    host, port = daemon.sockets[0].getsockname()[:2]
    server = EnvServer(build_env(Probe(), [Capability("echo", "tcp", f"tcp://{host}:{port}")]))
    host, port = await server.listen()
    try:
        async with connect(f"tcp://{host}:{port}", ready_timeout=TIMEOUT) as client:
            assert await client.start_task("greet", {"name": "uv"}) == {"prompt": "hello uv"}
            assert await client.grade("uv") == {"score": 1.0}
            routed = client.binding("echo").url.removeprefix("tcp://").rsplit(":", 1)
            reader, writer = await asyncio.open_connection(*routed)
            writer.write(b"through uvloop")
            writer.write_eof()
            assert await asyncio.wait_for(reader.read(), TIMEOUT) == b"through uvloop"
            writer.close()
    finally:
        await server.aclose()
        daemon.close()
        await daemon.wait_closed()


def test_a_rollout_and_a_tunnel_on_uvloop() -> None:
    with asyncio.Runner(loop_factory=uvloop.new_event_loop) as runner:
        runner.run(asyncio.wait_for(rollout_with_a_tunnel(), TIMEOUT * 2))
