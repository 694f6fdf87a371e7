"""Tasks outlive their connections: parking, resuming, adopting, expiring (DESIGN 3)."""

from __future__ import annotations

import asyncio
import contextlib
import json

from conftest import TIMEOUT, Raw, error, result, until

from proctor.channel import MAX_FRAME, Server


async def start_and_drop(raw, server: Server, tag: str) -> str:
    conn = await raw()
    sid = (await conn.result("hello"))["session_id"]
    await conn.result("tasks.start", {"id": "guarded", "args": {"tag": tag}})
    conn.close()
    await until(lambda: sid in server._parked)
    return sid


async def test_a_dropped_session_resumes_with_hello(raw, server, probe) -> None:
    sid = await start_and_drop(raw, server, "p")
    assert probe.finals == []
    conn = await raw()
    assert (await conn.result("hello", {"session_id": sid}))["session_id"] == sid
    assert sid not in server._parked
    assert await conn.result("tasks.grade", {"answer": "x"}) == {"score": 1.0}
    assert probe.finals == ["p"]


async def test_hello_with_an_unknown_session(raw) -> None:
    conn = await raw()
    await conn.send(
        {"jsonrpc": "2.0", "id": 1, "method": "hello", "params": {"session_id": "sess-nope"}}
    )
    assert await conn.line() == error(1, -32600, "hello: unknown session sess-nope")
    assert (await conn.result("hello"))["session_id"] != "sess-nope"


async def test_hello_with_a_live_session(raw) -> None:
    one, two = await raw(), await raw()
    sid = (await one.result("hello"))["session_id"]
    await two.send({"jsonrpc": "2.0", "id": 1, "method": "hello", "params": {"session_id": sid}})
    assert await two.line() == error(
        1, -32600, f"hello: session {sid} is still live on another connection"
    )


async def test_resume_into_a_session_holding_a_task_is_refused(raw, server, probe) -> None:
    sid = await start_and_drop(raw, server, "parked")
    conn = await raw()
    await conn.result("tasks.start", {"id": "guarded", "args": {"tag": "mine"}})
    reply = await conn.call("hello", {"session_id": sid})
    assert reply["error"] == {"code": -32600, "message": "hello: this session already holds a task"}
    assert sid in server._parked and probe.finals == []


async def test_grade_on_a_fresh_session_adopts_the_single_parked_task(raw, server, probe) -> None:
    await start_and_drop(raw, server, "adopted")
    conn = await raw()
    assert await conn.result("tasks.grade", {"answer": None}) == {"score": 1.0}
    assert probe.finals == ["adopted"] and server._parked == {}


async def test_grade_with_several_parked_tasks_names_them(raw, server, probe) -> None:
    one = await start_and_drop(raw, server, "one")
    two = await start_and_drop(raw, server, "two")
    conn = await raw()
    await conn.send({"jsonrpc": "2.0", "id": 1, "method": "tasks.grade", "params": {}})
    assert await conn.line() == error(
        1,
        -32600,
        f"tasks.grade: 2 parked tasks ({one}, {two}); resume one with hello {{session_id}}",
    )
    assert set(server._parked) == {one, two} and probe.finals == []


async def test_start_on_a_session_holding_a_task_cancels_the_old_one_first(raw, probe) -> None:
    conn = await raw()
    await conn.result("tasks.start", {"id": "guarded", "args": {"tag": "old"}})
    await conn.result("tasks.start", {"id": "guarded", "args": {"tag": "new"}})
    assert probe.finals == ["old"]
    await conn.result("tasks.grade", {"answer": None})
    assert probe.finals == ["old", "new"]


async def test_a_drop_during_start_cancels_instead_of_parking(raw, server, probe) -> None:
    conn = await raw()
    await conn.send(
        {"jsonrpc": "2.0", "id": 1, "method": "tasks.start", "params": {"id": "slow_start"}}
    )
    await asyncio.wait_for(probe.entered.wait(), TIMEOUT)
    conn.close()
    await probe.wait_final("slow")
    assert server._parked == {} and server._live == {}


async def test_a_drop_without_a_task_leaves_nothing(raw, server) -> None:
    conn = await raw()
    sid = (await conn.result("hello"))["session_id"]
    conn.close()
    await until(lambda: sid not in server._live)
    assert server._parked == {}


async def test_parked_tasks_expire_after_the_ttl(env, probe) -> None:
    server = Server(env, park_ttl=0.05)
    addr = await server.tcp_address()
    try:
        conn = Raw(*await asyncio.open_connection(*addr))
        sid = (await conn.result("hello"))["session_id"]
        await conn.result("tasks.start", {"id": "guarded", "args": {"tag": "ttl"}})
        conn.close()
        await probe.wait_final("ttl")
        assert server._parked == {}
        conn = Raw(*await asyncio.open_connection(*addr))
        assert (await conn.call("hello", {"session_id": sid}))["error"]["code"] == -32600
        conn.close()
    finally:
        await server.aclose()


async def test_aclose_finishes_every_task(env, probe) -> None:
    server = Server(env)
    addr = await server.tcp_address()
    conns = [Raw(*await asyncio.open_connection(*addr)) for _ in range(3)]
    await conns[0].result("tasks.start", {"id": "guarded", "args": {"tag": "live"}})
    await conns[1].result("tasks.start", {"id": "guarded", "args": {"tag": "parked"}})
    conns[1].close()
    await until(lambda: len(server._parked) == 1)
    await conns[2].send(
        {
            "jsonrpc": "2.0",
            "id": 1,
            "method": "tasks.start",
            "params": {"id": "slow_start", "args": {"tag": "running"}},
        }
    )
    await asyncio.wait_for(probe.entered.wait(), TIMEOUT)
    await server.aclose()
    assert sorted(probe.finals) == ["live", "parked", "running"]
    assert await conns[0].closed() and await conns[2].closed()
    for conn in conns:
        conn.close()


# --- the frame limit ---------------------------------------------------------------------------


async def test_an_oversized_frame_gets_a_null_id_error_then_close(raw) -> None:
    conn = await raw()
    await conn.send(
        json.dumps({"jsonrpc": "2.0", "id": 1, "method": "tasks.cancel"}).encode() + b"\n"
    )
    with contextlib.suppress(ConnectionError):  # the server may close before we finish
        await conn.send(b"x" * (MAX_FRAME + 1))
    assert await conn.line() == result(1, {"cancelled": False})
    assert await conn.line() == error(None, -32600, f"frame exceeds {MAX_FRAME} bytes")
    assert await conn.closed()


async def test_a_frame_of_exactly_the_limit_passes(raw) -> None:
    conn = await raw()
    head = b'{"jsonrpc":"2.0","id":1,"method":"tasks.cancel","params":{"pad":"'
    tail = b'"}}'
    await conn.send(head + b"y" * (MAX_FRAME - len(head) - len(tail)) + tail + b"\n")
    assert await conn.line() == result(1, {"cancelled": False})


async def test_frames_before_an_oversized_one_in_the_same_write_are_answered(server) -> None:
    replies: list[bytes] = []

    class Catch(asyncio.Protocol):
        def data_received(self, data: bytes) -> None:
            replies.append(data)

    transport = server.connect_memory(Catch())
    first = b'{"jsonrpc":"2.0","id":1,"method":"tasks.cancel"}\n'
    transport.write(first + first.replace(b"1", b"2") + b"z" * (MAX_FRAME + 1) + b"\n")
    assert b"".join(replies) == (
        result(1, {"cancelled": False})
        + result(2, {"cancelled": False})
        + error(None, -32600, f"frame of {MAX_FRAME + 1} bytes exceeds {MAX_FRAME}")
    )
    await until(lambda: transport.is_closing())


async def test_aclose_finishes_an_idle_session_task(env, probe) -> None:
    server = Server(env)
    conn = Raw(*await asyncio.open_connection(*await server.tcp_address()))
    await conn.result("tasks.start", {"id": "guarded", "args": {"tag": "idle"}})
    await server.aclose()
    assert probe.finals == ["idle"]
    conn.close()
