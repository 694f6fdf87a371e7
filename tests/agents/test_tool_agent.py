"""`ToolAgent` on a real model client against `FakeModelServer`, in real environments."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncGenerator, AsyncIterator
from pathlib import Path
from typing import Any

import pytest

from proctor import Environment, LocalRuntime, Run, Task, rollout
from proctor.agents import ToolAgent, function_tool
from proctor.models import (
    CHECKPOINT,
    ContextPolicy,
    ModelClient,
    model_client,
)
from proctor.testing import FakeClock, FakeModelServer, FakeRequest, FakeToolCall, Fault, Reply

SOURCE = Path(__file__).with_name("tools_env.py")

env = Environment("tool-agent-env")
shell = env.add_shell(timeout=10)


@env.template
async def write(workdir: str, text: str = "hello") -> AsyncGenerator[Any, Any]:
    answer = yield {
        "prompt": f"Write {text!r} to out.txt, then answer with the file's content.",
        "bindings": {"shell": {"cwd": workdir}},
    }
    on_disk = await shell.run("cat out.txt", cwd=workdir)
    yield 1.0 if on_disk.ok and on_disk.stdout == answer == text else 0.0


@env.template
async def chat(question: str = "ping") -> AsyncGenerator[Any, Any]:
    answer = yield {"prompt": [{"role": "user", "content": question}]}
    yield 1.0 if answer == "pong" else 0.0


WRITE_SCRIPT = [
    Reply.tool("shell", command="printf hello > out.txt"),
    Reply.tool("shell", command="cat out.txt"),
    Reply(text="hello"),
]


@pytest.fixture
async def runtime() -> AsyncIterator[LocalRuntime]:
    async with LocalRuntime(env) as rt:
        yield rt


def kinds(run: Run) -> list[str]:
    return [step.kind for step in run.trace.steps]


def steps(run: Run, kind: str) -> list[Any]:
    return [step for step in run.trace.steps if step.kind == kind]


def fast_client(url: str) -> ModelClient:
    """A client whose retry waits take no real time."""
    return model_client(url, clock=FakeClock())


@pytest.mark.parametrize("api", ["chat", "responses", "messages"])
async def test_the_loop_calls_tools_and_records_every_step(
    api: str, tmp_path: Path, runtime: LocalRuntime
) -> None:
    async with FakeModelServer(WRITE_SCRIPT) as fake:
        base = fake.origin if api == "messages" else fake.url
        agent = ToolAgent(f"fake/m@{base}?api={api}", system_prompt="Be brief.")
        run = await rollout(write(workdir=str(tmp_path)), agent, runtime=runtime)
    assert run.reward == 1.0, run.error
    assert run.trace.content == "hello"
    turn = ["model_turn", "tool_call", "tool_result"]
    assert kinds(run) == ["task", "user", *turn, *turn, "model_turn", "assistant", "task"]
    first, _, last = steps(run, "model_turn")
    assert first.data["usage"]["input_tokens"] > 0 and first.data["usage"]["output_tokens"] > 0
    assert first.data["attempts"][0]["cause"] == "ok" and first.data["step"] == 1
    assert first.content["tool_calls"][0]["function"]["name"] == "shell"
    assert last.data["finish_reason"] == "stop" and last.content["content"] == "hello"
    call, result = steps(run, "tool_call")[1], steps(run, "tool_result")[1]
    assert call.content == {"name": "shell", "arguments": {"command": "cat out.txt"}}
    assert result.content == "exit code: 0\n--- stdout ---\nhello"
    assert result.data["id"] == call.data["id"] and not result.data["is_error"]
    assert steps(run, "assistant")[0].data == {"stop_reason": "answer", "steps": 3}
    # what the model saw: the system prompt, the task, the tool, each result by call id
    seen = fake.requests[-1]
    assert seen.tool_names == ["shell"]
    assert [m["role"] for m in seen.messages] == ["system", "user"] + ["assistant", "tool"] * 2
    assert seen.messages[-1]["content"] == "exit code: 0\n--- stdout ---\nhello"


async def test_the_session_key_is_the_trace_id(tmp_path: Path, runtime: LocalRuntime) -> None:
    async with FakeModelServer(WRITE_SCRIPT) as fake:
        run = await rollout(
            write(workdir=str(tmp_path)), ToolAgent(f"fake/m@{fake.url}"), runtime=runtime
        )
    assert {r.headers.get("x-session-id") for r in fake.requests} == {run.trace_id}


async def test_tool_failures_become_results_and_the_loop_goes_on(runtime: LocalRuntime) -> None:
    def boom() -> str:
        """Always raises."""
        raise RuntimeError("bang")

    async def slow() -> str:
        """Never finishes in time."""
        await asyncio.sleep(30)
        return "late"

    script = [
        Reply.tool("boom"),
        Reply.tool("slow"),
        Reply(tool_calls=[FakeToolCall("shell", {"command": 42})]),
        Reply(text="pong"),
    ]
    async with FakeModelServer(script) as fake:
        agent = ToolAgent(f"fake/m@{fake.url}", tools=[boom, slow], tool_timeout=0.2)
        run = await rollout(chat(), agent, runtime=runtime)
    assert run.reward == 1.0, run.error
    results = [(s.content, s.data["is_error"]) for s in steps(run, "tool_result")]
    assert results == [
        ("tool 'boom' failed: RuntimeError: bang", True),
        ("tool 'slow' timed out after 0.2s", True),
        ("`command` must be a non-empty string", True),
    ]
    assert [t for t in fake.requests[0].tool_names] == ["shell", "boom", "slow"]


async def test_only_a_tool_that_kills_its_own_call_gets_time_past_the_timeout(
    runtime: LocalRuntime,
) -> None:
    async def nap() -> str:
        """Takes longer than the timeout, but less than the timeout plus any grace."""
        await asyncio.sleep(0.8)
        return "woke"

    script = [
        Reply.tool("nap"),
        Reply.tool("shell", command="echo started; sleep 5"),
        Reply(text="pong"),
    ]
    async with FakeModelServer(script) as fake:
        agent = ToolAgent(f"fake/m@{fake.url}", tools=[nap], tool_timeout=0.3)
        run = await rollout(chat(), agent, runtime=runtime)
    assert run.reward == 1.0, run.error
    napped, slept = steps(run, "tool_result")
    assert (napped.content, napped.data["is_error"]) == ("tool 'nap' timed out after 0.3s", True)
    # The shell server kills the command itself and says so, with its output so far.
    assert slept.content.startswith("exit code: -9 (timed out; the command was killed)")
    assert "started" in slept.content and slept.data["is_error"]


@pytest.mark.parametrize("api", ["chat", "responses", "messages"])
async def test_a_call_to_an_unknown_tool_gets_an_error_result(
    api: str, runtime: LocalRuntime
) -> None:
    async with FakeModelServer([Reply.tool("missing", x=1), "pong"]) as fake:
        base = fake.origin if api == "messages" else fake.url
        run = await rollout(chat(), ToolAgent(f"fake/m@{base}?api={api}"), runtime=runtime)
    assert run.reward == 1.0, run.error
    (result,) = steps(run, "tool_result")
    assert result.content == "unknown tool 'missing' (available: shell)"
    assert result.data["is_error"]
    assert len(fake.requests) == 2  # told, not resent
    assert fake.requests[1].messages[-1]["content"] == result.content


async def test_parallel_calls_in_one_turn_are_answered_in_order(runtime: LocalRuntime) -> None:
    def double(n: int) -> int:
        """Twice n."""
        return 2 * n

    calls = [FakeToolCall("double", {"n": n}) for n in (1, 2, 3)]
    async with FakeModelServer([Reply(tool_calls=calls), "pong"]) as fake:
        run = await rollout(
            chat(), ToolAgent(f"fake/m@{fake.url}", tools=[double]), runtime=runtime
        )
    assert run.reward == 1.0, run.error
    assert [s.content for s in steps(run, "tool_result")] == ["2", "4", "6"]
    tool_messages = [m for m in fake.requests[1].messages if m["role"] == "tool"]
    assert [m["content"] for m in tool_messages] == ["2", "4", "6"]
    assert [m["tool_call_id"] for m in tool_messages] == [
        s.data["id"] for s in steps(run, "tool_call")
    ]


async def test_max_steps_stops_with_a_reason_and_is_still_graded(runtime: LocalRuntime) -> None:
    async with FakeModelServer(Reply(text="pong", tool_calls=[FakeToolCall("shell")])) as fake:
        run = await rollout(chat(), ToolAgent(f"fake/m@{fake.url}", max_steps=3), runtime=runtime)
    assert run.status == "completed" and run.reward == 1.0  # the last text is the answer
    assert len(steps(run, "model_turn")) == 3 == len(fake.requests)
    assert steps(run, "assistant")[-1].data == {"stop_reason": "max_steps", "steps": 3}


async def test_agent_config_overrides_the_agent_settings(runtime: LocalRuntime) -> None:
    task = Task(
        env="tool-agent-env",
        id="chat",
        agent_config={"max_steps": 1, "system_prompt": "From the row."},
    )
    async with FakeModelServer(Reply.tool("shell", command="true")) as fake:
        run = await rollout(task, ToolAgent(f"fake/m@{fake.url}", max_steps=9), runtime=runtime)
    assert len(fake.requests) == 1
    assert fake.requests[0].messages[0] == {"role": "system", "content": "From the row."}
    assert steps(run, "assistant")[-1].data["stop_reason"] == "max_steps"


@pytest.mark.parametrize(
    "config, problem",
    [
        ({"max_steps": 0}, "max_steps must be an integer >= 1, not 0"),
        ({"max_steps": "3"}, "max_steps must be an integer >= 1, not '3'"),
        ({"tool_timeout": -1}, "tool_timeout must be a positive number of seconds, not -1"),
        ({"system_prompt": 7}, "system_prompt must be a string, not 7"),
    ],
)
async def test_a_bad_agent_config_fails_the_run_with_a_clear_error(
    config: dict[str, Any], problem: str, runtime: LocalRuntime
) -> None:
    task = Task(env="tool-agent-env", id="chat", agent_config=config)
    async with FakeModelServer("pong") as fake:
        run = await rollout(task, ToolAgent(f"fake/m@{fake.url}"), runtime=runtime)
    assert run.status == "failed" and run.error is not None
    assert (run.error.phase, run.error.type) == ("agent", "ValueError")
    assert run.error.message == f"agent_config: {problem}"
    assert fake.requests == []


async def test_a_model_error_fails_the_run_in_the_agent_phase(runtime: LocalRuntime) -> None:
    async with FakeModelServer(["only one reply"]) as fake:
        fake.inject(Fault.status(401, message="bad key"))
        run = await rollout(chat(), ToolAgent(f"fake/m@{fake.url}"), runtime=runtime)
    assert run.status == "failed" and run.error is not None
    assert run.error.phase == "agent" and run.error.type == "ModelRequestError"
    (turn,) = steps(run, "model_turn")
    assert (turn.data["cause"], turn.data["status"]) == ("refused", 401)
    assert [(a["cause"], a["status"]) for a in turn.data["attempts"]] == [("refused", 401)]


async def test_a_failed_model_call_leaves_its_attempts_on_the_trace(
    runtime: LocalRuntime,
) -> None:
    async with FakeModelServer() as fake:
        fake.inject(Fault.status(429), Fault.reset(), times=1)
        fake.inject(Fault.reset(), times=10)
        client = fast_client(f"fake/m@{fake.url}")
        try:
            run = await rollout(chat(), ToolAgent(client), runtime=runtime)
        finally:
            await client.aclose()
    assert run.status == "failed" and run.error is not None
    assert run.error.type == "RetriesExhausted"
    (turn,) = steps(run, "model_turn")
    assert turn.content is None and turn.data["step"] == 1
    assert turn.data["cause"] == "transport" and turn.data["status"] is None
    assert turn.data["error"].startswith("RetriesExhausted: gave up after 10")
    attempts = turn.data["attempts"]
    assert [a["cause"] for a in attempts] == ["throttled", *["transport"] * 10]
    assert attempts[0]["status"] == 429 and attempts[0]["wait"] > 0
    (row,) = [s for s in run.to_dict()["trace"]["steps"] if s["kind"] == "model_turn"]
    assert row["data"]["attempts"] == attempts  # in runs.jsonl too


async def test_retries_are_visible_in_the_model_turn(runtime: LocalRuntime) -> None:
    async with FakeModelServer(["pong"]) as fake:
        fake.inject(Fault.status(503), Fault.status(429, retry_after=7))
        client = fast_client(f"fake/m@{fake.url}")
        try:
            run = await rollout(chat(), ToolAgent(client), runtime=runtime)
        finally:
            await client.aclose()
    assert run.reward == 1.0, run.error
    (turn,) = steps(run, "model_turn")
    attempts = turn.data["attempts"]
    assert [(a["cause"], a["status"]) for a in attempts] == [
        ("server", 503),
        ("throttled", 429),
        ("ok", 200),
    ]
    assert attempts[1]["wait"] >= 7


async def test_compaction_keeps_the_history_under_the_policy(
    tmp_path: Path, runtime: LocalRuntime
) -> None:
    script = [Reply.tool("shell", command=f"seq 1 300 # {i}") for i in range(8)] + ["pong"]
    async with FakeModelServer(script) as fake:
        agent = ToolAgent(f"fake/m@{fake.url}", context=ContextPolicy(max_bytes=6000, keep_last=2))
        run = await rollout(chat(), agent, runtime=runtime)
    assert run.reward == 1.0, run.error
    sizes = [len(r.body) for r in fake.requests]
    assert max(sizes) < 9000 and len(fake.requests) == 9
    last = fake.requests[-1].messages
    assert last[0]["role"] == "user" and str(last[1]["content"]).startswith(CHECKPOINT)
    counts = [s.data["messages"] for s in steps(run, "model_turn")]
    assert counts != sorted(counts)  # the history shrank at least once


async def test_mcp_and_shell_tools_reach_the_model_through_the_tunnel() -> None:
    def policy(request: FakeRequest) -> Reply:
        results = [m["content"] for m in request.messages if m["role"] == "tool"]
        if not results:
            return Reply(
                tool_calls=[
                    FakeToolCall("add", {"a": 20, "b": 22}),
                    FakeToolCall("shell", {"command": "echo from the shell"}),
                ]
            )
        return Reply(text=f"{results[0]} / {results[1].splitlines()[-1]}")

    async with FakeModelServer(policy) as fake:
        run = await rollout(
            Task(env="tools-env", id="plain"),
            ToolAgent(f"fake/m@{fake.url}"),
            runtime=LocalRuntime(SOURCE),
        )
    assert run.reward == 1.0, run.error
    assert run.trace.content == "42 / from the shell"
    assert sorted(fake.requests[0].tool_names) == ["add", "refuse", "shell", "where"]


async def test_a_model_client_given_is_not_closed_by_the_agent(runtime: LocalRuntime) -> None:
    async with FakeModelServer("pong") as fake:
        client = model_client(f"fake/m@{fake.url}")
        try:
            agent = ToolAgent(client)
            for _ in range(2):
                run = await rollout(chat(), agent, runtime=runtime)
                assert run.reward == 1.0, run.error
        finally:
            await client.aclose()
    assert repr(agent) == f"ToolAgent('fake/m@{fake.url}', max_steps=30)"


def test_tools_and_settings_are_checked_up_front() -> None:
    with pytest.raises(ValueError, match="max_steps must be an integer >= 1, not 0"):
        ToolAgent("fake/m@http://127.0.0.1:9/v1", max_steps=0)
    with pytest.raises(ValueError, match="tool_timeout must be a positive number"):
        ToolAgent("fake/m@http://127.0.0.1:9/v1", tool_timeout=0)

    def size(text: str) -> int:
        return len(text)

    agent = ToolAgent("fake/m@http://127.0.0.1:9/v1", tools=[function_tool(size, name="n"), size])
    assert [t.name for t in agent.tools] == ["n", "size"]


async def test_duplicate_tool_names_fail_the_run(runtime: LocalRuntime) -> None:
    def shell_(command: str) -> str:
        return command

    clash = function_tool(shell_, name="shell")
    async with FakeModelServer("pong") as fake:
        run = await rollout(chat(), ToolAgent(f"fake/m@{fake.url}", tools=[clash]), runtime=runtime)
    assert run.error is not None and "two tools are named 'shell'" in run.error.message
