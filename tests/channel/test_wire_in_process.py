"""An in-process client holds its session directly: the same answers as over a socket.

Each test runs over loopback TCP and in memory (`target`); whatever the wire does to a
value, refuses or cuts short, the in-process path does too.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncGenerator

import pytest
from wire_helpers import TIMEOUT

from proctor import ChannelClosed, ConnectionLost, RemoteError
from proctor.channel import MAX_FRAME, EnvServer, connect
from proctor.env import Environment


@pytest.fixture(params=["tcp", "memory"])
async def target(request, server: EnvServer) -> str | EnvServer:
    if request.param == "memory":
        return server
    host, port = await server.tcp_address()
    return f"tcp://{host}:{port}"


async def test_values_cross_json_either_way(target) -> None:
    async with connect(target) as client:
        started = await client.start_task("count", {"n": 3, "scale": 2})
        assert started == {"prompt": "int:3 float:2.0"}
        await client.cancel()
        episode = await client.start_task("episode")
        assert episode["extra"] == [1, 2] and episode["bindings"]["echo"] == {"slot": 3}
        await client.cancel()
        await client.start_task("scored", {"kind": "eval"})
        grade = await client.grade(None)
        assert grade["subscores"][1] == {"name": "b", "value": 0.0, "weight": 3.0}
        assert grade["isError"] is True and grade["info"] == {"k": "v"}


@pytest.mark.parametrize("kind", ["object", "surrogate", "nan-under-int-key"])
async def test_a_prompt_that_is_not_json_is_a_task_error(target, kind: str) -> None:
    async with connect(target) as client:
        with pytest.raises(RemoteError) as info:
            await client.start_task("unserializable", {"kind": kind})
        assert info.value.code == -32000
        assert info.value.message.startswith("result is not JSON-serializable")
        assert await client.cancel() is True  # the task is still held


async def test_an_answer_that_is_not_json_is_refused_before_it_leaves(target, probe) -> None:
    async with connect(target) as client:
        await client.start_task("greet")
        with pytest.raises(TypeError):
            await client.grade(object())


async def test_an_oversized_request_is_refused_and_ends_the_session(target) -> None:
    async with connect(target) as client:
        with pytest.raises(RemoteError, match=f"exceeds {MAX_FRAME}"):
            await client.start_task("greet", {"name": "x" * MAX_FRAME})
        with pytest.raises((ConnectionLost, RemoteError)):
            for _ in range(100):  # the server hangs up right after its refusal
                await client.list_tasks()
                await asyncio.sleep(0.01)


async def test_closing_the_client_ends_a_call_running_in_another_task(target, probe) -> None:
    async with connect(target) as client:
        start = asyncio.create_task(client.start_task("slow_start"))
        await asyncio.wait_for(probe.entered.wait(), TIMEOUT)
    with pytest.raises(ChannelClosed):
        await start
    await probe.wait_final("slow")  # the server interrupted the task


async def test_the_token_holds_in_process_too(env: Environment) -> None:
    server = EnvServer(env, token="tok")
    try:
        for token in ("bad", None):
            with pytest.raises(RemoteError, match="unauthorized: a valid token is required"):
                async with connect(server, token=token):
                    pass
        assert not server._connections and not server._live  # nothing was opened
        async with connect(server, token="tok") as client:
            assert await client.start_task("greet") == {"prompt": "hello world"}
    finally:
        await server.aclose()


async def test_an_in_process_call_runs_in_the_callers_task(server: EnvServer) -> None:
    seen: list[asyncio.Task[object] | None] = []

    @server.env.template
    async def where() -> AsyncGenerator[object, object]:
        seen.append(asyncio.current_task())
        yield "here"
        yield 1.0

    async with connect(server) as client:
        assert client.manifest is not None and client.manifest.env_name == "wire-test"
        await client.start_task("where")
    assert seen == [asyncio.current_task()]


async def test_a_call_cancelled_while_waiting_its_turn_passes_it_on(target, probe) -> None:
    async with connect(target) as client:
        start = asyncio.create_task(client.start_task("slow_start"))
        await asyncio.wait_for(probe.entered.wait(), TIMEOUT)
        second = asyncio.create_task(client.list_tasks())
        third = asyncio.create_task(client.list_tasks())
        await asyncio.sleep(0.01)
        second.cancel()
        probe.gate.set()
        assert await start == {"prompt": "finally started"}
        with pytest.raises(asyncio.CancelledError):
            await second
        assert len(await third) > 3
        assert await client.grade(None) == {"score": 1.0}  # the turn is free again
