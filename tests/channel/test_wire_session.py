"""Control sessions over real loopback TCP, checked byte for byte (DESIGN 3)."""

from __future__ import annotations

import asyncio
import contextlib
import json
import re
from typing import Any

import pytest
from wire_helpers import build_env, error, frame, result, until

from proctor import RemoteError
from proctor.channel import EnvServer, connect

SESSION_ID = re.compile(r"sess-[0-9a-f]+")


# --- hello ---------------------------------------------------------------------------------


async def test_hello_reports_session_env_and_bindings(raw, echo) -> None:
    conn = await raw()
    await conn.send({"jsonrpc": "2.0", "id": 1, "method": "hello", "params": {"x": [1]}})
    line = await conn.line()
    reply = json.loads(line)
    sid = reply["result"]["session_id"]
    assert SESSION_ID.fullmatch(sid)
    token = reply["result"]["resume_token"]
    assert re.fullmatch(r"[A-Za-z0-9_-]{43}", token)  # 32 random bytes, urlsafe base64
    host, port = echo
    assert line == result(
        1,
        {
            "session_id": sid,
            "resume_token": token,
            "env": {"name": "wire-test", "version": "1.2.3"},
            "bindings": [
                {
                    "name": "echo",
                    "protocol": "tcp",
                    "url": f"tcp://{host}:{port}",
                    "params": {"x": 1},
                }
            ],
        },
    )


async def test_every_connection_gets_a_fresh_session_even_without_hello(raw, server) -> None:
    first, second = await raw(), await raw()
    await first.result("tasks.start", {"id": "guarded", "args": {"tag": "a"}})
    await second.result("tasks.list")
    ids = set(server._live)
    assert len(ids) == 2 and all(SESSION_ID.fullmatch(s) for s in ids)
    one = (await first.result("hello"))["session_id"]
    two = (await second.result("hello"))["session_id"]
    assert {one, two} == ids


async def test_hello_with_own_session_id_is_a_plain_hello(raw) -> None:
    conn = await raw()
    sid = (await conn.result("hello"))["session_id"]
    assert (await conn.result("hello", {"session_id": sid}))["session_id"] == sid


# --- tasks.list ----------------------------------------------------------------------------


async def test_tasks_list_publishes_arg_schemas_and_returns(raw) -> None:
    conn = await raw()
    tasks = {t["id"]: t for t in (await conn.result("tasks.list", {}))["tasks"]}
    assert tasks["greet"] == {
        "id": "greet",
        "description": "Greets someone.",
        "args": {
            "type": "object",
            "properties": {"name": {"type": "string", "default": "world"}},
            "additionalProperties": False,
        },
    }
    assert tasks["count"]["args"]["required"] == ["n"]
    assert tasks["count"]["args"]["properties"]["n"] == {"type": "integer"}
    assert "returns" not in tasks["count"]
    assert tasks["typed"]["returns"] == {"type": "integer"}


# --- tasks.start ---------------------------------------------------------------------------


async def test_start_with_a_string_prompt(raw) -> None:
    conn = await raw()
    await conn.send(
        b'{"jsonrpc":"2.0","id":7,"method":"tasks.start","params":{"id":"greet","args":{}}}\n'
    )
    assert await conn.line() == b'{"jsonrpc":"2.0","id":7,"result":{"prompt":"hello world"}}\n'


async def test_start_with_a_list_of_messages(raw) -> None:
    conn = await raw()
    assert await conn.result("tasks.start", {"id": "chat"}) == {
        "prompt": [{"role": "system", "content": "be brief"}, {"role": "user", "content": "hi"}]
    }


async def test_start_passes_a_prompt_dict_whole(raw) -> None:
    conn = await raw()
    assert await conn.result("tasks.start", {"id": "episode", "args": None}) == {
        "prompt": "use the episode shell",
        "bindings": {"echo": {"slot": 3}, "ghost": {"url": "tcp://127.0.0.1:9"}},
        "extra": [1, 2],
    }


async def test_per_episode_bindings_must_map_names_to_objects(raw, probe) -> None:
    conn = await raw()
    reply = await conn.call("tasks.start", {"id": "misbound"})
    assert reply["error"]["code"] == -32000
    assert reply["error"]["message"].startswith(
        "misbound: per-episode 'bindings' must map capability name -> object"
    )
    assert await conn.result("tasks.list") is not None  # the session goes on


async def test_args_are_coerced_by_annotation(raw) -> None:
    conn = await raw()
    reply = await conn.result("tasks.start", {"id": "count", "args": {"n": "3", "scale": 2}})
    assert reply == {"prompt": "int:3 float:2.0"}


async def test_unknown_arg_fails_before_any_task_code_runs(raw, probe) -> None:
    conn = await raw()
    reply = await conn.call("tasks.start", {"id": "count", "args": {"n": 1, "bogus": 2}})
    assert reply["error"]["code"] == -32000
    assert reply["error"]["message"].startswith("count: unknown argument(s) 'bogus'")
    reply = await conn.call("tasks.start", {"id": "count", "args": {"n": "three"}})
    assert reply["error"]["code"] == -32000 and "count" in reply["error"]["message"]
    reply = await conn.call("tasks.start", {"id": "count"})
    assert (
        reply["error"]["code"] == -32000 and "missing argument(s) 'n'" in reply["error"]["message"]
    )
    assert probe.ran == []


async def test_a_task_raising_in_start_is_a_task_error(raw) -> None:
    conn = await raw()
    await conn.send(
        {"jsonrpc": "2.0", "id": 1, "method": "tasks.start", "params": {"id": "broken_start"}}
    )
    reply = json.loads(await conn.line())
    trace = reply["error"].pop("data")["traceback"]  # the task's own traceback (docs/wire.md)
    assert frame(reply) == error(1, -32000, "broken_start: RuntimeError: cannot set up")
    assert trace.endswith('raise RuntimeError("cannot set up")\nRuntimeError: cannot set up\n')
    # the session goes on
    assert await conn.result("tasks.start", {"id": "greet"}) == {"prompt": "hello world"}


# --- tasks.grade ---------------------------------------------------------------------------


async def grade(conn, kind: str) -> bytes:
    await conn.result("tasks.start", {"id": "scored", "args": {"kind": kind}})
    await conn.send({"jsonrpc": "2.0", "id": 9, "method": "tasks.grade", "params": {"answer": 1}})
    return await conn.line()


@pytest.mark.parametrize(
    ("kind", "expected"),
    [
        ("float", {"score": 0.25}),
        ("bool", {"score": 1.0}),
        ("dict", {"score": 1.0, "info": {"n": 2}, "done": True}),
        (  # a template that never yields its reward scores 0, and says so
            "none",
            {
                "score": 0.0,
                "info": {
                    "proctor_warnings": ["the template ended without a second yield; scored 0"]
                },
            },
        ),
        (
            "eval",
            {
                "score": 0.25,
                "subscores": [
                    {"name": "a", "value": 1.0, "weight": 1.0},
                    {"name": "b", "value": 0.0, "weight": 3.0},
                ],
                "info": {"k": "v"},
                "content": "explained",
                "isError": True,
            },
        ),
    ],
)
async def test_grade_shapes(raw, kind: str, expected: dict[str, Any]) -> None:
    assert await grade(await raw(), kind) == result(9, expected)


@pytest.mark.parametrize(
    ("kind", "message"),
    [
        ("nan", "scored: score must be a finite number; got nan"),
        ("inf", "scored: score must be a finite number; got inf"),
        (
            "text",
            "scored: second yield must be a number, a Grade or a dict with "
            "a numeric 'score'; got str",
        ),
        ("raise", "scored: ValueError: boom"),
    ],
)
async def test_bad_scores_and_raising_tasks_are_task_errors(raw, kind: str, message: str) -> None:
    conn = await raw()
    reply = json.loads(await grade(conn, kind))
    data = reply["error"].pop("data", None)
    assert frame(reply) == error(9, -32000, message)
    assert (data is not None) == (kind == "raise")  # only a raising task has a traceback
    assert await conn.result("tasks.list") is not None  # the session goes on


async def test_grade_sends_the_answer_in(raw, probe) -> None:
    conn = await raw()
    await conn.result("tasks.start", {"id": "greet", "args": {"name": "ada"}})
    assert await conn.result("tasks.grade", {"answer": "ada", "extra": 1}) == {"score": 1.0}
    assert probe.answers == ["ada"]


async def test_returns_type_gives_a_parsed_answer(raw, probe) -> None:
    conn = await raw()
    await conn.result("tasks.start", {"id": "typed"})
    assert await conn.result("tasks.grade", {"answer": "42"}) == {"score": 1.0}
    await conn.result("tasks.start", {"id": "typed"})
    assert await conn.result("tasks.grade", {"answer": "forty"}) == {"score": 0.0}
    parsed, failed = probe.answers
    assert (parsed.content, parsed.raw, parsed.error) == (42, "42", None)
    assert (failed.content, failed.raw) == (None, "forty") and failed.error


async def test_grade_without_a_task(raw) -> None:
    conn = await raw()
    assert await conn.call("tasks.grade", {"answer": 1}) == json.loads(
        error(1, -32600, "no task in progress")  # HUD's CLI matches this text exactly
    )


async def test_the_generator_is_single_use(raw) -> None:
    conn = await raw()
    await conn.result("tasks.start", {"id": "greet"})
    await conn.result("tasks.grade", {"answer": "world"})
    reply = await conn.call("tasks.grade", {"answer": "world"})
    assert reply["error"] == {"code": -32600, "message": "no task in progress"}


# --- tasks.cancel and bye ------------------------------------------------------------------


async def test_cancel_with_nothing_to_cancel(raw) -> None:
    conn = await raw()
    await conn.send({"jsonrpc": "2.0", "id": "c", "method": "tasks.cancel", "params": {}})
    assert await conn.line() == b'{"jsonrpc":"2.0","id":"c","result":{"cancelled":false}}\n'


async def test_cancel_closes_the_suspended_task(raw, probe) -> None:
    conn = await raw()
    await conn.result("tasks.start", {"id": "guarded", "args": {"tag": "t"}})
    assert await conn.result("tasks.cancel") == {"cancelled": True}
    assert probe.finals == ["t"]
    assert (await conn.call("tasks.grade"))["error"]["code"] == -32600


async def test_cancel_interrupts_an_in_flight_start_and_answers_it_first(raw, probe) -> None:
    conn = await raw()
    await conn.send(
        {"jsonrpc": "2.0", "id": 1, "method": "tasks.start", "params": {"id": "slow_start"}}
    )
    await asyncio.wait_for(probe.entered.wait(), 5)
    await conn.send({"jsonrpc": "2.0", "id": 2, "method": "tasks.cancel"})
    assert await conn.line() == error(1, -32000, "tasks.cancel interrupted the task")
    assert await conn.line() == result(2, {"cancelled": True})
    assert probe.finals == ["slow"]


async def test_cancel_interrupts_an_in_flight_grade(raw, probe) -> None:
    conn = await raw()
    await conn.result("tasks.start", {"id": "slow_grade"})
    await conn.send({"jsonrpc": "2.0", "id": 1, "method": "tasks.grade", "params": {"answer": 0}})
    await asyncio.wait_for(probe.entered.wait(), 5)
    await conn.send({"jsonrpc": "2.0", "id": 2, "method": "tasks.cancel"})
    assert await conn.line() == error(1, -32000, "tasks.cancel interrupted the task")
    assert await conn.line() == result(2, {"cancelled": True})
    assert probe.finals == ["slow"]


async def test_bye_says_goodbye_cancels_and_closes(raw, probe, server) -> None:
    conn = await raw()
    await conn.result("tasks.start", {"id": "guarded", "args": {"tag": "b"}})
    await conn.send({"jsonrpc": "2.0", "id": 3, "method": "bye"})
    assert await conn.line() == b'{"jsonrpc":"2.0","id":3,"result":{"goodbye":true}}\n'
    assert await conn.closed()
    assert probe.finals == ["b"]
    assert server._parked == {}


async def test_bye_interrupts_an_in_flight_start(raw, probe, server) -> None:
    conn = await raw()
    await conn.send(
        {"jsonrpc": "2.0", "id": 1, "method": "tasks.start", "params": {"id": "slow_start"}}
    )
    await asyncio.wait_for(probe.entered.wait(), 5)
    await conn.send({"jsonrpc": "2.0", "id": 2, "method": "bye"})
    assert await conn.line() == error(1, -32000, "tasks.cancel interrupted the task")
    assert await conn.line() == result(2, {"goodbye": True})
    assert await conn.closed()
    assert probe.finals == ["slow"] and server._parked == {}


async def test_one_call_at_a_time(raw, probe) -> None:
    conn = await raw()
    await conn.send(
        {"jsonrpc": "2.0", "id": 1, "method": "tasks.start", "params": {"id": "slow_start"}}
    )
    await asyncio.wait_for(probe.entered.wait(), 5)
    for rid, method in enumerate(("tasks.list", "hello", "tasks.start", "tasks.grade"), 2):
        await conn.send({"jsonrpc": "2.0", "id": rid, "method": method, "params": {}})
        assert await conn.line() == error(rid, -32600, f"{method}: a task call is still running")
    probe.gate.set()
    assert await conn.line() == result(1, {"prompt": "finally started"})
    assert await conn.result("tasks.grade", {"answer": None}) == {"score": 1.0}


async def test_next_request_right_after_a_reply_is_not_busy(raw) -> None:
    conn = await raw()
    for _ in range(20):
        start = frame(
            {"jsonrpc": "2.0", "id": 1, "method": "tasks.start", "params": {"id": "greet"}}
        )
        grade_ = frame(
            {"jsonrpc": "2.0", "id": 2, "method": "tasks.grade", "params": {"answer": "world"}}
        )
        await conn.send(start)
        assert (await conn.recv())["id"] == 1
        await conn.send(grade_)
        assert await conn.line() == result(2, {"score": 1.0})


# --- notifications and errors ----------------------------------------------------------------


async def test_notifications_are_executed_never_answered(raw, probe, server) -> None:
    conn = await raw()
    await conn.send(
        {
            "jsonrpc": "2.0",
            "method": "tasks.start",
            "params": {"id": "guarded", "args": {"tag": "n"}},
        }
    )
    # started and settled, so the cancel below cannot catch the start before it ran
    await until(lambda: any(s.runner and not s.call for s in server._live.values()))
    await conn.send({"jsonrpc": "2.0", "method": "no.such.method"})
    await conn.send({"jsonrpc": "2.0", "method": "tasks.start", "params": []})
    await conn.send({"jsonrpc": "2.0", "method": "tasks.cancel"})
    await probe.wait_final("n")
    await conn.send({"jsonrpc": "2.0", "id": 5, "method": "tasks.cancel"})
    # the first frame answered at all is this one
    assert await conn.line() == result(5, {"cancelled": False})


async def test_parse_error_has_null_id_and_the_session_goes_on(raw) -> None:
    conn = await raw()
    await conn.send(b'{"jsonrpc":"2.0","id":1,"method":\n')
    assert await conn.line() == error(None, -32700, "parse error: not valid JSON")
    await conn.send(b"\xff\xfe not utf-8\n")
    assert await conn.line() == error(None, -32700, "parse error: not valid JSON")
    assert await conn.result("tasks.cancel") == {"cancelled": False}


@pytest.mark.parametrize(
    ("line", "expected"),
    [
        (b"[]", error(None, -32600, "invalid request: batch arrays are not supported")),
        (
            b'[{"jsonrpc":"2.0","id":1,"method":"hello"}]',
            error(None, -32600, "invalid request: batch arrays are not supported"),
        ),
        (b"42", error(None, -32600, "invalid request: a request must be a JSON object")),
        (b'"hello"', error(None, -32600, "invalid request: a request must be a JSON object")),
        (b"null", error(None, -32600, "invalid request: a request must be a JSON object")),
        (
            b'{"jsonrpc":"2.0","id":[1],"method":"hello"}',
            error(None, -32600, "invalid request: id must be a string or number"),
        ),
        (
            b'{"jsonrpc":"2.0","id":{},"method":"hello"}',
            error(None, -32600, "invalid request: id must be a string or number"),
        ),
        (
            b'{"jsonrpc":"2.0","id":true,"method":"hello"}',
            error(None, -32600, "invalid request: id must be a string or number"),
        ),
        (
            b'{"jsonrpc":"2.0","id":4}',
            error(4, -32600, "invalid request: need jsonrpc '2.0' and a method"),
        ),
        (
            b'{"jsonrpc":"2.0","id":4,"method":7}',
            error(4, -32600, "invalid request: need jsonrpc '2.0' and a method"),
        ),
        (
            b'{"jsonrpc":"1.0","id":4,"method":"hello"}',
            error(4, -32600, "invalid request: need jsonrpc '2.0' and a method"),
        ),
        (
            b'{"jsonrpc":"2.0","id":4,"method":"tasks.frobnicate"}',
            error(4, -32601, "method not found: tasks.frobnicate"),
        ),
        (
            b'{"jsonrpc":"2.0","id":4,"method":"hello","params":[1]}',
            error(4, -32602, "hello: params must be an object"),
        ),
        (
            b'{"jsonrpc":"2.0","id":4,"method":"hello","params":{"session_id":5}}',
            error(4, -32602, "hello: session_id and resume_token are strings"),
        ),
        (
            b'{"jsonrpc":"2.0","id":4,"method":"tasks.start","params":{"id":5}}',
            error(4, -32602, "tasks.start: need {id: str, args?: object}"),
        ),
        (
            b'{"jsonrpc":"2.0","id":4,"method":"tasks.start","params":{"id":"greet","args":[]}}',
            error(4, -32602, "tasks.start: need {id: str, args?: object}"),
        ),
        (
            b'{"jsonrpc":"2.0","id":4,"method":"tasks.start","params":{"id":"nope"}}',
            error(4, -32602, "tasks.start: unknown task 'nope'"),
        ),
        (
            b'{"jsonrpc":"2.0","id":4,"method":"tunnel.open","params":{"capability":"echo"}}',
            error(4, -32600, "tunnel.open: only valid as a connection's first frame"),
        ),
    ],
)
async def test_invalid_requests(raw, line: bytes, expected: bytes) -> None:
    conn = await raw()
    await conn.result("hello")
    await conn.send(line + b"\n")
    assert await conn.line() == expected
    assert await conn.result("tasks.cancel") == {"cancelled": False}


async def test_invalid_first_frames_start_a_session_too(raw) -> None:
    conn = await raw()
    await conn.send(b"not json\n")
    assert await conn.line() == error(None, -32700, "parse error: not valid JSON")
    assert await conn.result("tasks.cancel") == {"cancelled": False}


async def test_blank_lines_and_crlf_are_tolerated(raw) -> None:
    conn = await raw()
    await conn.send(
        b"\n\r\n  \n"
        + frame({"jsonrpc": "2.0", "id": 1, "method": "tasks.cancel"}).replace(b"\n", b"\r\n")
    )
    assert await conn.line() == result(1, {"cancelled": False})


async def test_pipelined_frames_in_one_write_are_answered_in_order(raw) -> None:
    conn = await raw()
    await conn.send(
        b"".join(frame({"jsonrpc": "2.0", "id": i, "method": "tasks.cancel"}) for i in range(50))
    )
    for i in range(50):
        assert await conn.line() == result(i, {"cancelled": False})


@pytest.mark.parametrize(
    "rid",
    [
        "",
        "x" * 300,
        "ünïcødé ☃",
        0,
        -1,
        2**53,
        2**63 - 1,
        -(2**63),
        2**64 - 1,
        2**64,
        -(2**63) - 1,
        10**30,
        1.5,
        -0.0,
        1e300,
        None,
    ],
)
async def test_ids_are_echoed_exactly(raw, rid: Any) -> None:
    conn = await raw()
    await conn.send({"jsonrpc": "2.0", "id": rid, "method": "tasks.cancel"})
    assert await conn.line() == result(rid, {"cancelled": False})


# --- faults of the environment's own code ------------------------------------------------------


async def test_a_failing_teardown_does_not_refuse_the_next_start(raw, caplog) -> None:
    conn = await raw()
    await conn.result("tasks.start", {"id": "broken_teardown"})
    assert await conn.result("tasks.start", {"id": "greet"}) == {"prompt": "hello world"}
    await conn.result("tasks.start", {"id": "broken_teardown"})
    assert await conn.result("tasks.cancel") == {"cancelled": True}
    warnings = [r.getMessage() for r in caplog.records if r.levelname == "WARNING"]
    assert warnings == ["broken_teardown: teardown failed: RuntimeError: teardown broke"] * 2


async def test_a_crash_outside_the_task_code_is_still_answered(raw, caplog) -> None:
    conn = await raw()
    reply = await conn.call("tasks.start", {"id": "positional", "args": {"x": 1}})
    assert reply["error"]["code"] == -32000
    assert reply["error"]["message"].startswith("positional: TypeError: ")
    await conn.result("tasks.start", {"id": "scored", "args": {"kind": "huge"}})
    reply = await conn.call("tasks.grade", {"answer": None})
    assert reply["error"]["code"] == -32000
    # an integer beyond float range is a bad score like NaN, named as such
    assert reply["error"]["message"].startswith("scored: score must be a finite number; got 1000")
    assert await conn.result("tasks.start", {"id": "greet"}) == {"prompt": "hello world"}
    # both are the task's own failures, answered as such: nothing logged at ERROR
    assert [r.getMessage() for r in caplog.records if r.levelname == "ERROR"] == []


class Opaque:
    """A type pydantic knows no schema for."""


async def test_a_template_whose_schema_cannot_be_built(probe, caplog) -> None:
    env = build_env(probe, [])

    @env.template
    async def opaque(thing: Opaque) -> Any:
        yield "p"
        yield 1.0

    server = EnvServer(env)
    async with connect(server) as client:
        # the listing survives: the unschemable arg is published as "any value"
        listed = {t["id"]: t for t in await client.list_tasks()}
        assert listed["opaque"]["args"]["properties"] == {"thing": {}}
        with pytest.raises(RemoteError, match=r"^\[-32000\] opaque: PydanticSchema"):
            await client.start_task("opaque", {"thing": 1})
        assert await client.start_task("greet") == {"prompt": "hello world"}
    await server.aclose()
    caplog.clear()


async def test_a_refused_bye_leaves_the_session_as_it_was(raw, server, probe) -> None:
    conn = await raw()
    sid = (await conn.result("hello"))["session_id"]
    await conn.result("tasks.start", {"id": "slow_teardown", "args": {"tag": "t"}})
    await conn.send({"jsonrpc": "2.0", "id": 1, "method": "tasks.cancel"})
    await asyncio.wait_for(probe.entered.wait(), 5)
    await conn.send({"jsonrpc": "2.0", "id": 2, "method": "bye"})
    assert await conn.line() == error(2, -32600, "a cancel is already running")
    probe.gate.set()
    assert await conn.line() == result(1, {"cancelled": True})
    await conn.result("tasks.start", {"id": "guarded", "args": {"tag": "kept"}})
    conn.close()
    await until(lambda: sid in server._parked)  # parked, not cancelled as after a bye
    assert probe.finals == ["t"]


@pytest.mark.parametrize("kind", ["object", "surrogate", "nan-under-int-key"])
async def test_a_prompt_that_is_not_json_is_a_task_error(raw, kind: str) -> None:
    conn = await raw()
    reply = await conn.call("tasks.start", {"id": "unserializable", "args": {"kind": kind}})
    assert reply["error"]["code"] == -32000
    assert reply["error"]["message"].startswith("result is not JSON-serializable")
    assert await conn.result("tasks.cancel") == {"cancelled": True}  # the task is still held


async def test_a_client_that_never_reads_is_throttled_not_buffered(server) -> None:
    host, port = await server.listen("127.0.0.1", 0)
    _reader, writer = await asyncio.open_connection(host, port)
    request = b'{"jsonrpc":"2.0","id":1,"method":"tasks.list"}\n'
    # Write requests for a while without reading a single reply.
    with contextlib.suppress(TimeoutError):
        async with asyncio.timeout(1.0):
            while True:
                writer.write(request * 200)
                await writer.drain()
    (conn,) = server._connections
    assert conn.transport is not None
    # The server stopped reading once its replies backed up; its buffer stays bounded.
    assert conn.transport.get_write_buffer_size() < 4 * 1024 * 1024
    writer.close()
