"""Per-episode bindings are data for declared capabilities, merged into `run.binding()`."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from typing import Any
from urllib.parse import urlsplit

import pytest

from proctor import Capability, Environment, LocalRuntime, Run, rollout


@pytest.fixture
async def echo_url() -> AsyncIterator[str]:
    async def handle(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        writer.write(await reader.read(100))
        await writer.drain()
        writer.close()

    daemon = await asyncio.start_server(handle, "127.0.0.1", 0)
    host, port = daemon.sockets[0].getsockname()[:2]
    yield f"tcp://{host}:{port}"
    daemon.close()
    await daemon.wait_closed()


async def test_binding_merges_episode_data_and_tunnels_to_the_declared_capability(
    echo_url: str,
) -> None:
    env = Environment("episodes", capabilities=[Capability("echo", "tcp", echo_url, {"a": 1})])

    @env.template
    async def slot(n: int) -> Any:
        answer = yield {"prompt": "use your slot", "bindings": {"echo": {"slot": n}}}
        yield float(answer == f"slot-{n}")

    seen: dict[str, Any] = {}

    async def agent(run: Run) -> None:
        cap = run.binding("echo")
        seen["params"] = cap.params
        seen["episode"] = run.episode_bindings
        host, port = urlsplit(cap.url).hostname, urlsplit(cap.url).port
        reader, writer = await asyncio.open_connection(host, port)
        writer.write(f"slot-{cap.params['slot']}".encode())
        run.trace.content = (await reader.read(100)).decode()
        writer.close()

    run = await rollout(slot(n=4), agent, runtime=LocalRuntime(env))
    assert run.reward == 1.0, run.error
    assert seen == {"params": {"a": 1, "slot": 4}, "episode": {"echo": {"slot": 4}}}
