"""`LocalRuntime`, `Endpoint` and `UrlRuntime(url)`: sources, refcounted lifetime, errors."""

from __future__ import annotations

import asyncio
import socket
from collections.abc import AsyncGenerator
from pathlib import Path
from typing import Any

import pytest

from _support.echo_env import SOURCE, make_echo_env
from proctor import Environment, RemoteError, SourceError, Task, connect
from proctor.agents import agent_from_fn
from proctor.engine import rollout
from proctor.runtimes import Endpoint, LocalRuntime, UrlRuntime, find_environment

events: list[str] = []


env = make_echo_env("local-rt", events)
echoer = agent_from_fn(lambda p: p)
TASK = Task(env="local-rt", id="echo", args={"text": "hi"})


@pytest.fixture(autouse=True)
def _clear() -> None:
    events.clear()


def hooks() -> list[str]:
    """The lifecycle hooks `env` ran, in order (without its tasks' "finally")."""
    return [e for e in events if e != "finally"]


async def graded(runtime: Any, task: Task = TASK) -> None:
    run = await rollout(task, echoer, runtime=runtime)
    assert run.status == "completed" and run.reward == 1.0, run.error


# --- sources --------------------------------------------------------------------------------


async def test_serves_an_environment_object() -> None:
    await graded(LocalRuntime(env))
    assert hooks() == ["init", "shutdown"]


async def test_serves_a_path() -> None:
    task = Task(env="echo-env", id="echo", args={"text": "x"})
    await graded(LocalRuntime(SOURCE), task)
    await graded(LocalRuntime(str(SOURCE)), task)


async def test_a_path_that_fails_to_load(tmp_path: Path) -> None:
    path = tmp_path / "local_rt_broken.py"
    path.write_text("raise ValueError('cannot even')\n")
    run = await rollout(TASK, echoer, runtime=LocalRuntime(path))
    assert run.error is not None
    assert (run.error.phase, run.error.type) == ("provisioning", "RuntimeLaunchError")
    assert "cannot even" in run.error.message


async def test_serves_from_factories() -> None:
    def sync_factory() -> Environment:
        return env

    async def async_factory() -> Environment:
        await asyncio.sleep(0)
        return env

    await graded(LocalRuntime(sync_factory))
    await graded(LocalRuntime(async_factory))


async def test_a_factory_that_returns_something_else() -> None:
    run = await rollout(TASK, echoer, runtime=LocalRuntime(lambda: "not an env"))
    assert run.error is not None and run.error.type == "RuntimeLaunchError"
    assert "returned str, not an Environment" in run.error.message


def test_find_environment(tmp_path: Path) -> None:
    path = tmp_path / "local_rt_two.py"
    path.write_text(
        "from proctor import Environment\na = Environment('local-rt-a')\n"
        "b = Environment('local-rt-b')\n"
    )
    assert find_environment(path, "local-rt-b").name == "local-rt-b"
    with pytest.raises(SourceError, match="found local-rt-a, local-rt-b"):
        find_environment(path)
    with pytest.raises(SourceError, match="no environment named 'nope'"):
        find_environment(path, "nope")


async def test_a_path_with_several_environments_serves_the_tasks_one(tmp_path: Path) -> None:
    path = tmp_path / "local_rt_several.py"
    path.write_text(
        "from _support.echo_env import make_echo_env\n"
        "first = make_echo_env('local-rt-first')\nsecond = make_echo_env('local-rt-second')\n"
    )
    task = Task(env="local-rt-second", id="echo", args={"text": "x"})
    await graded(LocalRuntime(path), task)


# --- lifetime ---------------------------------------------------------------------------------


async def test_overlapping_rollouts_share_one_start_and_a_later_one_starts_again() -> None:
    runtime = LocalRuntime(env)
    together = asyncio.Barrier(3)

    async def wait_for_all(prompt: str) -> str:
        async with asyncio.timeout(5):
            await together.wait()
        return prompt

    runs = await asyncio.gather(
        *(rollout(TASK, agent_from_fn(wait_for_all), runtime=runtime) for _ in range(3))
    )
    assert all(r.reward == 1.0 for r in runs)
    assert hooks() == ["init", "shutdown"]
    await graded(runtime)
    assert hooks() == ["init", "shutdown"] * 2


async def test_entered_as_a_context_manager_it_stays_up() -> None:
    async with LocalRuntime(env) as runtime:
        await graded(runtime)
        await graded(runtime)
        assert hooks() == ["init"]
    assert hooks() == ["init", "shutdown"]


async def test_a_restart_waits_for_the_previous_shutdown() -> None:
    slow = Environment("local-rt-slow-stop")

    @slow.initialize
    def _init() -> None:
        events.append("init")

    @slow.shutdown
    async def _shutdown() -> None:
        events.append("stopping")
        await asyncio.sleep(0.05)
        events.append("stopped")

    runtime = LocalRuntime(slow)
    task = Task(env="local-rt-slow-stop", id="any")
    first = runtime(task)
    await first.__aenter__()
    leaving = asyncio.create_task(first.__aexit__(None, None, None))
    await asyncio.sleep(0.01)  # the shutdown hook is running now
    async with runtime(task):
        assert events == ["init", "stopping", "stopped", "init"]
    await leaving


async def test_initialize_failure_is_a_launch_error_after_the_shutdown_hooks() -> None:
    flaky = Environment("local-rt-flaky")
    fail = [True]

    @flaky.shutdown
    def _shutdown() -> None:
        events.append("shutdown")

    @flaky.initialize
    def _init() -> None:
        if fail[0]:
            raise OSError("port 22 taken")
        events.append("init")

    @flaky.template
    async def echo(text: str) -> AsyncGenerator[Any, Any]:
        yield text
        yield 1.0

    runtime = LocalRuntime(flaky)
    task = Task(env="local-rt-flaky", id="echo", args={"text": "x"})
    run = await rollout(task, echoer, runtime=runtime)
    assert run.error is not None
    assert (run.error.phase, run.error.type) == ("provisioning", "RuntimeLaunchError")
    assert "initialize failed" in run.error.message and "port 22 taken" in run.error.message
    assert events == ["shutdown"]
    fail[0] = False
    await graded(runtime, task)  # nothing stuck: the next rollout starts it afresh
    assert events == ["shutdown", "init", "shutdown"]


async def test_a_task_for_another_environment_is_refused_before_anything_starts() -> None:
    runtime = LocalRuntime(env)
    run = await rollout(Task(env="someone-else", id="echo"), echoer, runtime=runtime)
    assert run.error is not None
    assert (run.error.phase, run.error.type) == ("provisioning", "RuntimeLaunchError")
    assert "'someone-else'" in run.error.message and "'local-rt'" in run.error.message
    assert events == []  # before the fix: started, and never stopped
    async with runtime:
        run = await rollout(Task(env="someone-else", id="echo"), echoer, runtime=runtime)
        assert run.error is not None and run.error.type == "RuntimeLaunchError"
        await graded(runtime)
    assert hooks() == ["init", "shutdown"]


async def test_runtimes_of_different_environments_do_not_serialize() -> None:
    a, b = Environment("local-rt-a2"), Environment("local-rt-b2")
    a_up, b_up = asyncio.Event(), asyncio.Event()

    @a.initialize
    async def _a() -> None:
        a_up.set()
        await b_up.wait()  # needs b's initialize to run meanwhile

    @b.initialize
    async def _b() -> None:
        b_up.set()
        await a_up.wait()

    async def enter(runtime: LocalRuntime) -> None:
        async with runtime:
            pass

    async with asyncio.timeout(5):
        await asyncio.gather(enter(LocalRuntime(a)), enter(LocalRuntime(b)))


def test_one_runtime_serves_from_successive_event_loops() -> None:
    slow_start = Environment("local-rt-loops")

    @slow_start.initialize
    async def _init() -> None:
        await asyncio.sleep(0.01)  # rollouts queue on the runtime's lock meanwhile

    @slow_start.template
    async def echo(text: str) -> AsyncGenerator[Any, Any]:
        yield text
        yield 1.0

    runtime = LocalRuntime(slow_start)
    task = Task(env="local-rt-loops", id="echo", args={"text": "x"})

    async def batch() -> list[float | None]:
        runs = await asyncio.gather(*(rollout(task, echoer, runtime=runtime) for _ in range(3)))
        return [r.reward for r in runs]

    assert asyncio.run(batch()) == [1.0] * 3
    assert asyncio.run(batch()) == [1.0] * 3


# --- endpoints --------------------------------------------------------------------------------


async def test_in_process_endpoint_binds_a_loopback_listener_only_on_demand() -> None:
    async with LocalRuntime(env)(TASK) as endpoint:
        assert endpoint.url == "memory://local-rt"
        assert endpoint.server is not None and endpoint.target is endpoint.server
        url = await endpoint.tcp_url()
        assert url.startswith("tcp://127.0.0.1:") and await endpoint.tcp_url() == url
        async with connect(url, ready_timeout=2, token=endpoint.token) as client:
            assert client.manifest is not None and client.manifest.env_name == "local-rt"
        with pytest.raises(RemoteError, match="unauthorized"):  # not open to other users
            async with connect(url, ready_timeout=2):
                pass
    port = int(url.rsplit(":", 1)[1])
    with pytest.raises(ConnectionRefusedError):
        socket.create_connection(("127.0.0.1", port), timeout=2).close()


async def test_tcp_endpoint_and_url_runtime() -> None:
    endpoint = Endpoint("tcp://127.0.0.1:9")
    assert endpoint.target == "tcp://127.0.0.1:9" and await endpoint.tcp_url() == endpoint.url
    runtime = UrlRuntime("tcp://example.invalid:1")
    assert repr(runtime) == "UrlRuntime('tcp://example.invalid:1')"
    async with runtime(TASK) as got:
        assert got == Endpoint("tcp://example.invalid:1")


async def test_url_runtime_against_an_in_process_listener() -> None:
    async with LocalRuntime(env)(TASK) as endpoint:
        url = await endpoint.tcp_url()
        await graded(UrlRuntime(url, token=endpoint.token))
