"""Tasks outlive their connections: parking, resuming, adopting, expiring (DESIGN 3)."""

from __future__ import annotations

import asyncio
import contextlib
import gc
import json
import tracemalloc
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any

import pytest
from wire_helpers import TIMEOUT, Raw, error, result, until

from proctor.channel import MAX_FRAME, EnvServer, connect


async def start_and_drop(raw, server: EnvServer, tag: str) -> tuple[str, str]:
    """Start `guarded` on a connection of its own and drop it; returns (session id, token)."""
    conn = await raw()
    hello = await conn.result("hello")
    sid, token = hello["session_id"], hello["resume_token"]
    await conn.result("tasks.start", {"id": "guarded", "args": {"tag": tag}})
    conn.close()
    await until(lambda: sid in server._parked)
    return sid, token


def hello(id: int, **params: str) -> dict[str, object]:
    return {"jsonrpc": "2.0", "id": id, "method": "hello", "params": params}


async def test_a_dropped_session_resumes_with_hello_and_its_token(raw, server, probe) -> None:
    sid, token = await start_and_drop(raw, server, "p")
    assert probe.finals == []
    conn = await raw()
    resumed = await conn.result("hello", {"session_id": sid, "resume_token": token})
    assert resumed["session_id"] == sid and resumed["resume_token"] == token
    assert sid not in server._parked
    assert await conn.result("tasks.grade", {"answer": "x"}) == {"score": 1.0}
    assert probe.finals == ["p"]


async def test_resuming_without_the_token_or_with_a_wrong_one_is_refused_alike(
    raw, server, probe
) -> None:
    sid, token = await start_and_drop(raw, server, "kept")
    conn = await raw()
    refusal = error(1, -32600, f"hello: unknown session {sid} or wrong token")
    await conn.send(hello(1, session_id=sid))
    assert await conn.line() == refusal
    wrong = token[:-1] + ("A" if token[-1] != "A" else "B")
    await conn.send(hello(1, session_id=sid, resume_token=wrong))
    assert await conn.line() == refusal
    await conn.send(hello(1, session_id="sess-0000000000000000", resume_token=token))
    assert await conn.line() == error(
        1, -32600, "hello: unknown session sess-0000000000000000 or wrong token"
    )
    assert sid in server._parked and probe.finals == []
    await conn.send(hello(2, session_id=sid, resume_token=token))
    assert json.loads(await conn.line())["result"]["session_id"] == sid


async def test_hello_with_an_unknown_session(raw) -> None:
    conn = await raw()
    await conn.send(hello(1, session_id="sess-nope", resume_token="x"))
    assert await conn.line() == error(1, -32600, "hello: unknown session sess-nope or wrong token")
    assert (await conn.result("hello"))["session_id"] != "sess-nope"


async def test_hello_with_a_live_session(raw) -> None:
    one, two = await raw(), await raw()
    first = await one.result("hello")
    sid = first["session_id"]
    await two.send(hello(1, session_id=sid))  # without its token: nothing is revealed
    assert await two.line() == error(1, -32600, f"hello: unknown session {sid} or wrong token")
    await two.send(hello(2, session_id=sid, resume_token=first["resume_token"]))
    assert await two.line() == error(
        2, -32600, f"hello: session {sid} is still live on another connection"
    )


async def test_resume_into_a_session_holding_a_task_is_refused(raw, server, probe) -> None:
    sid, token = await start_and_drop(raw, server, "parked")
    conn = await raw()
    await conn.result("tasks.start", {"id": "guarded", "args": {"tag": "mine"}})
    reply = await conn.call("hello", {"session_id": sid, "resume_token": token})
    assert reply["error"] == {"code": -32600, "message": "hello: this session already holds a task"}
    assert sid in server._parked and probe.finals == []


async def test_a_bare_grade_never_adopts_a_parked_task(raw, server, probe) -> None:
    sid, _ = await start_and_drop(raw, server, "mine")
    stranger = await raw()
    await stranger.send({"jsonrpc": "2.0", "id": 1, "method": "tasks.grade", "params": {}})
    assert await stranger.line() == error(1, -32600, "no task in progress")
    assert sid in server._parked and probe.finals == []


async def test_errors_never_name_other_sessions(raw, server, probe) -> None:
    one, _ = await start_and_drop(raw, server, "one")
    two, _ = await start_and_drop(raw, server, "two")
    stranger = await raw()
    seen = b""
    calls: list[dict[str, Any]] = [
        {"method": "tasks.grade", "params": {"answer": "x"}},
        {"method": "hello", "params": {"session_id": "sess-0"}},
        {"method": "tasks.cancel"},
        {"method": "tasks.start", "params": {"id": "nope"}},
    ]
    for rid, msg in enumerate(calls):
        await stranger.send({"jsonrpc": "2.0", "id": rid, **msg})
        seen += await stranger.line()
    assert one.encode() not in seen and two.encode() not in seen
    assert set(server._parked) == {one, two} and probe.finals == []


# --- HUD's rules, behind legacy_resume ----------------------------------------------------------


@pytest.fixture
async def legacy(env) -> AsyncIterator[tuple[EnvServer, Callable[[], Awaitable[Raw]]]]:
    server = EnvServer(env, legacy_resume=True)
    addr = await server.tcp_address()
    opened: list[Raw] = []

    async def open_raw() -> Raw:
        opened.append(Raw(*await asyncio.open_connection(*addr)))
        return opened[-1]

    yield server, open_raw
    for conn in opened:
        conn.close()
    await server.aclose()


async def test_legacy_resume_needs_no_token_but_refuses_a_wrong_one(legacy, probe) -> None:
    server, raw = legacy
    sid, _ = await start_and_drop(raw, server, "legacy")
    conn = await raw()
    await conn.send(hello(1, session_id=sid, resume_token="wrong"))
    assert await conn.line() == error(1, -32600, f"hello: unknown session {sid} or wrong token")
    assert (await conn.result("hello", {"session_id": sid}, id=2))["session_id"] == sid
    assert await conn.result("tasks.grade", {"answer": "x"}) == {"score": 1.0}
    assert probe.finals == ["legacy"]


async def test_legacy_grade_on_a_fresh_session_adopts_the_single_parked_task(legacy, probe) -> None:
    server, raw = legacy
    await start_and_drop(raw, server, "adopted")
    conn = await raw()
    assert await conn.result("tasks.grade", {"answer": None}) == {"score": 1.0}
    assert probe.finals == ["adopted"] and server._parked == {}


async def test_legacy_grade_with_several_parked_tasks_names_them_as_hud_does(legacy, probe) -> None:
    server, raw = legacy
    one, _ = await start_and_drop(raw, server, "one")
    two, _ = await start_and_drop(raw, server, "two")
    conn = await raw()
    await conn.send({"jsonrpc": "2.0", "id": 1, "method": "tasks.grade", "params": {}})
    assert await conn.line() == error(
        1,
        -32600,
        f"tasks.grade: 2 parked tasks ({one}, {two}); resume one with hello {{session_id}}",
    )
    assert set(server._parked) == {one, two} and probe.finals == []


# --- the parking caps ---------------------------------------------------------------------------


async def test_3000_start_and_drop_cycles_stay_within_the_cap(env, probe) -> None:
    server = EnvServer(env, max_parked=20)
    try:
        tracemalloc.start()
        for i in range(3000):
            if i == 1000:
                await until(lambda: len(probe.finals) >= 980)
                gc.collect()
                base = tracemalloc.get_traced_memory()[0]
            async with connect(server) as client:
                await client.start_task("guarded", {"tag": str(i)})
            assert len(server._parked) <= 20
        await until(lambda: len(probe.finals) == 2980)
        gc.collect()
        grown = tracemalloc.get_traced_memory()[0] - base
        tracemalloc.stop()
        assert grown < 2 * 1024 * 1024, grown  # 2,000 more cycles, no more memory
        assert probe.finals == [str(i) for i in range(2980)]  # the oldest went first
        assert len(server._parked) == 20
    finally:
        tracemalloc.stop()
        await server.aclose()


async def test_parking_is_capped_in_bytes_too(env, probe) -> None:
    server = EnvServer(env, max_parked_bytes=40 * 1024)  # two tasks of 16 KiB and a bit
    addr = await server.tcp_address()
    opened: list[Raw] = []

    async def open_raw() -> Raw:
        opened.append(Raw(*await asyncio.open_connection(*addr)))
        return opened[-1]

    try:
        sids = [(await start_and_drop(open_raw, server, str(i)))[0] for i in range(2)]
        assert set(server._parked) == set(sids) and probe.finals == []
        await start_and_drop(open_raw, server, "2")
        assert sids[0] not in server._parked and len(server._parked) == 2
        await probe.wait_final("0")
    finally:
        for conn in opened:
            conn.close()
        await server.aclose()


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
    server = EnvServer(env, park_ttl=0.05)
    addr = await server.tcp_address()
    try:
        conn = Raw(*await asyncio.open_connection(*addr))
        first = await conn.result("hello")
        sid, token = first["session_id"], first["resume_token"]
        await conn.result("tasks.start", {"id": "guarded", "args": {"tag": "ttl"}})
        conn.close()
        await probe.wait_final("ttl")
        assert server._parked == {}
        conn = Raw(*await asyncio.open_connection(*addr))
        reply = await conn.call("hello", {"session_id": sid, "resume_token": token})
        assert reply["error"]["code"] == -32600
        conn.close()
    finally:
        await server.aclose()


async def test_aclose_finishes_every_task(env, probe) -> None:
    server = EnvServer(env)
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
    await conn.result("hello", id=0)  # a first frame is at most 64 KiB
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
    server = EnvServer(env)
    conn = Raw(*await asyncio.open_connection(*await server.tcp_address()))
    await conn.result("tasks.start", {"id": "guarded", "args": {"tag": "idle"}})
    await server.aclose()
    assert probe.finals == ["idle"]
    conn.close()
