"""Issue 13's wire additions on a real server over loopback TCP: `tasks.solve` runs a
template's reference solution in the substrate, `tasks.start` says what `tasks.grade`
must carry (`needs`), and the grade's `trace`, `stop_reason` and `judge` reach the
functions that take them."""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest

from proctor import RemoteError
from proctor.channel import EnvServer, connect
from proctor.channel._client import EnvClient
from proctor.env import Environment

seen: dict[str, Any] = {}


def solvable_env(folder: Path) -> Environment:
    env = Environment("solvable")
    env.add_shell(cwd=folder)

    async def solve_in_shell(shell: Any, task: Any) -> str:
        result = await shell.run(f"echo $(( {task.a} + {task.b} ))")
        return str(result.stdout).strip()

    @env.template(solution=solve_in_shell)
    async def add(a: int, b: int) -> Any:
        answer = yield f"{a} + {b} = ?"
        yield float(answer == str(a + b))

    @env.template
    async def unsolvable() -> Any:
        yield "no reference"
        yield 0.0

    def raise_in_solution() -> str:
        raise LookupError("no key")

    @env.template(solution=raise_in_solution)
    async def broken() -> Any:
        yield "x"

    @env.template
    async def watched() -> Any:
        yield "do it"

    @watched.reward
    def saw_trace(trace: list[dict[str, Any]], stop_reason: str | None) -> float:
        seen.update(trace=trace, stop_reason=stop_reason)
        return 1.0

    @env.template
    async def judged() -> Any:
        yield "be judged"

    @judged.reward
    def saw_judge(judge: Any) -> float:
        seen["judge"] = judge
        return 1.0

    return env


@pytest.fixture
async def client(tmp_path: Path) -> AsyncIterator[EnvClient]:
    seen.clear()
    env = solvable_env(tmp_path)
    await env.start()  # the shell capability starts in an initialize hook
    server = EnvServer(env)
    host, port = await server.tcp_address()
    try:
        async with connect(f"tcp://{host}:{port}") as c:
            yield c
    finally:
        await server.aclose()
        await env.stop()


async def test_solve_runs_the_solution_in_the_substrate_and_keeps_the_task(
    client: EnvClient,
) -> None:
    await client.start_task("add", {"a": 2, "b": 40})
    assert await client.solve() == "42"
    assert await client.solve() == "42"  # still in progress
    assert await client.grade("42") == {"score": 1.0}


async def test_solve_errors(client: EnvClient) -> None:
    with pytest.raises(RemoteError) as info:
        await client.solve()
    assert (info.value.code, info.value.message) == (-32600, "no task in progress")

    await client.start_task("unsolvable")
    with pytest.raises(RemoteError) as info:
        await client.solve()
    assert (info.value.code, info.value.message) == (-32000, "unsolvable: declares no solution")
    assert await client.grade("x") == {"score": 0.0}  # the task went on

    await client.start_task("broken")
    with pytest.raises(RemoteError) as info:
        await client.solve()
    assert info.value.message == "broken: solution: LookupError: no key"
    assert "no key" in info.value.data["traceback"]


async def test_needs_says_what_grade_must_carry(client: EnvClient) -> None:
    assert await client.start_task("add", {"a": 1, "b": 1}) == {"prompt": "1 + 1 = ?"}
    assert await client.start_task("watched") == {"prompt": "do it", "needs": ["trace"]}
    assert await client.start_task("judged") == {"prompt": "be judged", "needs": ["judge"]}


async def test_trace_and_stop_reason_reach_the_rewards(client: EnvClient) -> None:
    steps = [
        {"kind": "user", "content": "do it", "data": None},
        {"kind": "assistant", "content": "done", "data": None},
    ]
    await client.start_task("watched")
    grade = await client.grade("done", trace=steps, stop_reason="max_turns")
    assert grade == {
        "score": 1.0,
        "subscores": [{"name": "saw_trace", "value": 1.0, "weight": 1.0}],
        "info": {},
    }
    assert seen == {"trace": steps, "stop_reason": "max_turns"}

    await client.start_task("watched")
    await client.grade("done")  # not sent: an empty trace, no stop reason
    assert seen == {"trace": [], "stop_reason": None}


async def test_a_judge_is_made_from_the_grade_params(client: EnvClient) -> None:
    await client.start_task("judged")
    await client.grade("x")
    assert seen["judge"] is None  # no judge sent

    params = {"base_url": "http://127.0.0.1:9/v1", "api_key": "session-secret", "model": "m"}
    await client.start_task("judged")
    await client.grade("x", judge=params)
    judge = seen["judge"]
    assert judge is not None
    assert "session-secret" not in repr(judge)


async def test_solve_is_answered_on_the_raw_wire(tmp_path: Path) -> None:
    env = solvable_env(tmp_path)
    await env.start()
    server = EnvServer(env)
    host, port = await server.tcp_address()
    reader, writer = await asyncio.open_connection(host, port)
    try:
        for rid, method, params in [
            (1, "tasks.start", {"id": "add", "args": {"a": 3, "b": 4}}),
            (2, "tasks.solve", {}),
        ]:
            writer.write(
                json.dumps(
                    {"jsonrpc": "2.0", "id": rid, "method": method, "params": params}
                ).encode()
                + b"\n"
            )
            reply = json.loads(await asyncio.wait_for(reader.readline(), 10))
        assert reply == {"jsonrpc": "2.0", "id": 2, "result": {"answer": "7"}}
    finally:
        writer.close()
        await writer.wait_closed()
        await server.aclose()
        await env.stop()
