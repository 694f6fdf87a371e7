"""Lifecycle hooks per task: setup before the template's body, finalize before the answer
goes in and rewards run, each with its own timeout; a failure names its phase on the wire
(`data.phase`, beside `data.traceback`). Driven over a real server on loopback TCP, and
through `rollout()` for the phase a run records."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from typing import Any

import pytest

from proctor import Environment, LocalRuntime, RemoteError, TaskError, agent_from_fn, rollout
from proctor.channel import EnvServer, connect
from proctor.channel._client import EnvClient

order: list[str] = []


def hooked_env() -> Environment:
    env = Environment("hooks")

    @env.template
    async def ordered() -> Any:
        order.append("body")
        try:
            answer = yield "go"
            order.append(f"answer {answer}")
        finally:
            order.append("teardown")

    @env.setup
    async def first() -> None:
        order.append("env setup")

    @ordered.setup(timeout=5)
    def second() -> None:
        order.append("template setup")

    @ordered.finalize
    async def wrap_up(answer: str) -> None:
        order.append(f"finalize sees {answer}")

    @ordered.reward
    def score() -> float:
        order.append("reward")
        return 1.0

    @env.template
    async def slow_setup() -> Any:
        order.append("slow_setup body")
        yield "never reached"

    @slow_setup.setup(timeout=0.05)
    async def wait_forever() -> None:
        await asyncio.Event().wait()  # runs until its timeout

    @env.template
    async def broken_finalize() -> Any:
        try:
            yield "go"
        finally:
            order.append("teardown")

    @broken_finalize.finalize
    def explode() -> None:
        raise OSError("disk full")

    @env.template
    async def slow_finalize() -> Any:
        yield "go"

    @slow_finalize.finalize(timeout=0.05)
    async def hang() -> None:
        await asyncio.Event().wait()  # runs until its timeout

    @env.template
    async def broken_setup() -> Any:
        yield "never reached"

    @broken_setup.setup
    def refuse() -> None:
        raise RuntimeError("no database")

    return env


@pytest.fixture
async def client() -> AsyncIterator[EnvClient]:
    order.clear()
    server = EnvServer(hooked_env())
    host, port = await server.tcp_address()
    try:
        async with connect(f"tcp://{host}:{port}") as c:
            yield c
    finally:
        await server.aclose()


async def test_hooks_run_in_order_around_the_template(client: EnvClient) -> None:
    assert await client.start_task("ordered") == {"prompt": "go"}
    assert order == ["env setup", "template setup", "body"]
    grade = await client.grade("done")
    assert grade["score"] == 1.0
    # It ended after its first yield, so its teardown ran before the rewards.
    assert order[3:] == ["finalize sees done", "answer done", "teardown", "reward"]


async def test_a_setup_timeout_names_the_phase(client: EnvClient) -> None:
    with pytest.raises(RemoteError) as info:
        await client.start_task("slow_setup")
    assert info.value.message == "slow_setup: setup timed out after 0.05s"
    assert info.value.data["phase"] == "setup"
    assert "slow_setup body" not in order
    assert await client.start_task("ordered") == {"prompt": "go"}  # the session goes on


async def test_a_setup_failure_names_the_phase_with_its_traceback(client: EnvClient) -> None:
    with pytest.raises(RemoteError) as info:
        await client.start_task("broken_setup")
    assert info.value.code == -32000
    assert info.value.message == "broken_setup: setup refuse: RuntimeError: no database"
    assert info.value.data["phase"] == "setup"
    assert "no database" in info.value.data["traceback"]


async def test_a_finalize_failure_names_the_phase_and_teardown_still_runs(
    client: EnvClient,
) -> None:
    await client.start_task("broken_finalize")
    with pytest.raises(RemoteError) as info:
        await client.grade("x")
    assert info.value.message == "broken_finalize: finalize explode: OSError: disk full"
    assert info.value.data["phase"] == "finalize"
    assert "disk full" in info.value.data["traceback"]
    assert order == ["env setup", "teardown"]


async def test_a_finalize_timeout_names_the_phase(client: EnvClient) -> None:
    await client.start_task("slow_finalize")
    with pytest.raises(RemoteError) as info:
        await client.grade("x")
    assert info.value.message == "slow_finalize: finalize timed out after 0.05s"
    assert info.value.data["phase"] == "finalize"


async def test_a_failed_run_records_the_hook_phase() -> None:
    env = hooked_env()
    for template, phase, message in [
        ("broken_setup", "setup", "setup refuse: RuntimeError: no database"),
        ("broken_finalize", "finalize", "finalize explode: OSError: disk full"),
    ]:
        run = await rollout(
            env.tasks[template](), agent_from_fn(lambda p: "x"), runtime=LocalRuntime(env)
        )
        assert run.status == "failed"
        assert run.error is not None
        assert (run.error.phase, message in run.error.message) == (phase, True)


def test_a_task_error_keeps_its_phase_across_pickling() -> None:
    import pickle

    error = pickle.loads(pickle.dumps(TaskError("t: setup timed out after 1s", phase="setup")))
    assert (str(error), error.phase) == ("t: setup timed out after 1s", "setup")
    assert pickle.loads(pickle.dumps(TaskError("plain"))).phase is None
