"""`rollout()`: the happy path, every failure phase, deadlines and cancellation."""

from __future__ import annotations

import asyncio
import contextlib
import socket
import time
from collections import defaultdict
from collections.abc import AsyncGenerator, AsyncIterator
from typing import Any

import orjson
import pytest

from _support.echo_env import make_echo_env
from proctor import Task
from proctor.agents import Run, agent_from_fn
from proctor.engine import Timeouts, rollout
from proctor.runtimes import Endpoint, LocalRuntime, UrlRuntime

events: list[str] = []
reached: defaultdict[str, asyncio.Event] = defaultdict(asyncio.Event)  # points tasks got to

env = make_echo_env("engine-rollout", events)
echo = env.tasks["echo"]


@env.template
async def broken_setup() -> AsyncGenerator[Any, Any]:
    raise ValueError("no fixtures today")
    yield  # pragma: no cover


@env.template
async def broken_grader() -> AsyncGenerator[Any, Any]:
    yield "anything"
    raise KeyError("rubric")


@env.template
async def slow_setup(seconds: float) -> AsyncGenerator[Any, Any]:
    try:
        await asyncio.sleep(seconds)
        yield "ready"
        yield 1.0
    finally:
        events.append("finally")


@env.template
async def slow_grader(seconds: float) -> AsyncGenerator[Any, Any]:
    try:
        yield "ready"
        await asyncio.sleep(seconds)
        yield 1.0
    finally:
        events.append("finally")


@env.template
async def slow_finally(seconds: float) -> AsyncGenerator[Any, Any]:
    try:
        yield "ready"
        yield 1.0
    finally:
        reached["slow finally"].set()
        await asyncio.sleep(seconds)
        events.append("finally")


@pytest.fixture(autouse=True)
def _clear() -> None:
    events.clear()
    reached.clear()


solver = agent_from_fn(lambda prompt: prompt)


async def hang(prompt: Any) -> None:
    await asyncio.Event().wait()


def closed_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


class Wrapped:
    """A provider around LocalRuntime whose exit can be made slow or broken."""

    def __init__(self, *, exit_delay: float = 0.0, exit_error: Exception | None = None) -> None:
        self.inner = LocalRuntime(env)
        self.exit_delay = exit_delay
        self.exit_error = exit_error
        self.exited = False

    def __call__(self, task: Task) -> contextlib.AbstractAsyncContextManager[Endpoint]:
        return self._cm(task)

    @contextlib.asynccontextmanager
    async def _cm(self, task: Task) -> AsyncIterator[Endpoint]:
        async with self.inner(task) as endpoint:
            yield endpoint
        await asyncio.sleep(self.exit_delay)
        self.exited = True
        if self.exit_error is not None:
            raise self.exit_error


# --- happy path ---------------------------------------------------------------------------


async def test_graded_run_and_its_trace() -> None:
    before = time.time()
    run = await rollout(echo(text="hi"), solver, runtime=LocalRuntime(env))
    assert run.status == "completed" and run.error is None
    assert run.reward == 1.0 and run.grade is not None and run.grade.reward == 1.0
    assert run.prompt == "hi" and run.answer == "hi"
    kinds = [(s.kind, (s.data or {}).get("phase")) for s in run.trace.steps]
    assert kinds == [("task", "setup"), ("user", None), ("assistant", None), ("task", "evaluate")]
    starts = [s.start for s in run.trace.steps]
    assert starts == sorted(starts)
    assert all(before <= s.start <= s.end <= time.time() for s in run.trace.steps)
    assert run.trace.steps[-1].content == {"score": 1.0}
    assert run.ended_at is not None and run.duration is not None and run.duration >= 0
    assert run.client is None  # the live connection is gone with the rollout
    assert events == ["init", "finally", "shutdown"]
    row = orjson.loads(orjson.dumps(run.to_dict()))
    assert row["status"] == "completed" and row["reward"] == 1.0 and row["error"] is None


async def test_wrong_answer_is_graded_zero_not_an_error() -> None:
    run = await rollout(echo(text="hi"), agent_from_fn(lambda p: "nope"), runtime=LocalRuntime(env))
    assert run.status == "completed" and run.reward == 0.0 and run.error is None


async def test_ids_pass_through() -> None:
    run = await rollout(
        echo(text="a"), solver, runtime=LocalRuntime(env), job_id="j", group_id="g", trace_id="t"
    )
    assert (run.job_id, run.group_id, run.trace_id) == ("j", "g", "t")


async def test_default_runtime_finds_the_environment_in_this_process() -> None:
    run = await rollout(echo(text="x"), solver)
    assert run.reward == 1.0


# --- failure phases -------------------------------------------------------------------------


def assert_teardown_failed(run: Run, error: str, *words: str) -> None:
    """After a grade, a failed teardown keeps the run graded, the error beside it."""
    assert run.status == "completed" and run.reward == 1.0, run
    assert run.error is not None
    assert (run.error.phase, run.error.type) == ("teardown", error), run.error
    for word in words:
        assert word in run.error.message, run.error.message


def assert_failed(run: Run, phase: str, error: str, *words: str) -> None:
    assert run.status == "failed", run
    assert run.error is not None
    assert (run.error.phase, run.error.type) == (phase, error), run.error
    for word in words:
        assert word in run.error.message, run.error.message
    assert run.reward is None  # an error is never a reward of 0


async def test_provisioning_failure() -> None:
    @contextlib.asynccontextmanager
    async def broken(task: Task) -> AsyncIterator[Endpoint]:
        raise OSError("no capacity")
        yield Endpoint("never")  # pragma: no cover

    run = await rollout(echo(text="a"), solver, runtime=broken)
    assert_failed(run, "provisioning", "OSError", "no capacity")


async def test_provider_that_raises_when_called() -> None:
    def broken(task: Task) -> contextlib.AbstractAsyncContextManager[Endpoint]:
        raise RuntimeError("bad placement")

    run = await rollout(echo(text="a"), solver, runtime=broken)
    assert_failed(run, "provisioning", "RuntimeError", "bad placement")


async def test_default_runtime_without_such_environment() -> None:
    run = await rollout(Task(env="nowhere-to-be-found", id="x"), solver)
    assert_failed(run, "provisioning", "RuntimeLaunchError", "nowhere-to-be-found")


async def test_connecting_failure_is_bounded_by_the_connect_timeout() -> None:
    t0 = time.monotonic()
    run = await rollout(
        echo(text="a"),
        solver,
        runtime=UrlRuntime(f"tcp://127.0.0.1:{closed_port()}"),
        timeout=Timeouts(connect=0.5),
    )
    assert_failed(run, "connecting", "ConnectTimeout", "0.5s")
    assert time.monotonic() - t0 < 3


async def test_a_listener_that_never_answers_hello_is_bounded_by_the_connect_timeout() -> None:
    hung_up = asyncio.Event()

    async def silent(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await reader.read()  # accept, never answer, until the client hangs up
        writer.close()
        await writer.wait_closed()
        hung_up.set()

    server = await asyncio.start_server(silent, "127.0.0.1", 0)
    async with server:
        port = server.sockets[0].getsockname()[1]
        async with asyncio.timeout(5):  # a regression fails here rather than hanging
            run = await rollout(
                echo(text="a"),
                solver,
                runtime=UrlRuntime(f"tcp://127.0.0.1:{port}"),
                timeout=Timeouts(connect=0.3),
            )
        async with asyncio.timeout(2):
            await hung_up.wait()  # the rollout closed its connection
    # Whichever equal deadline fires first names it: the phase's or connect()'s own.
    assert run.error is not None and run.error.phase == "connecting"
    assert run.error.type in ("RolloutTimeout", "ConnectTimeout"), run.error


async def test_connect_timeout_keeps_its_type_under_a_rollout_deadline() -> None:
    run = await rollout(
        echo(text="a"),
        solver,
        runtime=UrlRuntime(f"tcp://127.0.0.1:{closed_port()}"),
        timeout=Timeouts(rollout=30, connect=0.3),
    )
    assert_failed(run, "connecting", "ConnectTimeout")


async def test_starting_failure_names_the_task() -> None:
    run = await rollout(broken_setup(), solver, runtime=LocalRuntime(env))
    assert_failed(run, "starting", "RemoteError", "broken_setup", "no fixtures today")
    assert run.trace.steps == []


async def test_agent_failure_cancels_the_task() -> None:
    def crash(prompt: str) -> str:
        raise RuntimeError("agent fell over")

    async with LocalRuntime(env) as runtime:  # kept up: only tasks.cancel closes the task
        run = await rollout(echo(text="a"), agent_from_fn(crash), runtime=runtime)
        assert_failed(run, "agent", "RuntimeError", "agent fell over")
        assert events == ["init", "finally"]
    assert events == ["init", "finally", "shutdown"]


async def test_grading_failure() -> None:
    run = await rollout(broken_grader(), solver, runtime=LocalRuntime(env))
    assert_failed(run, "grading", "RemoteError", "broken_grader", "rubric")


async def test_teardown_failure_after_a_grade() -> None:
    provider = Wrapped(exit_error=OSError("could not remove sandbox"))
    run = await rollout(echo(text="a"), solver, runtime=provider)
    assert_teardown_failed(run, "OSError", "could not remove sandbox")


async def test_teardown_that_hangs_is_cut_at_its_deadline() -> None:
    provider = Wrapped(exit_delay=30)
    t0 = time.monotonic()
    run = await rollout(echo(text="a"), solver, runtime=provider, timeout=Timeouts(teardown=0.2))
    assert time.monotonic() - t0 < 2
    assert_teardown_failed(run, "RolloutTimeout", "teardown timed out after 0.2s")
    assert run.error is not None and not provider.exited


async def test_teardown_failure_after_another_failure_keeps_the_first() -> None:
    provider = Wrapped(exit_error=OSError("also broken"))
    run = await rollout(broken_setup(), solver, runtime=provider)
    assert_failed(run, "starting", "RemoteError")
    assert provider.exited


async def test_bad_grade_result_is_a_protocol_error() -> None:
    class Fake:
        async def cancel(self) -> bool:
            return False

        async def grade(self, answer: Any) -> dict[str, Any]:
            return {"score": "high"}

    run = Run(echo(text="a"))
    run.client = Fake()  # type: ignore[assignment]
    with pytest.raises(Exception, match="bad result"):
        await run.submit()


# --- deadlines ---------------------------------------------------------------------------


async def test_rollout_timeout_names_the_agent_phase_and_cancels_the_task() -> None:
    async with LocalRuntime(env) as runtime:
        t0 = time.monotonic()
        run = await rollout(echo(text="a"), agent_from_fn(hang), runtime=runtime, timeout=0.3)
        assert time.monotonic() - t0 < 2
        assert_failed(run, "agent", "RolloutTimeout", "agent timed out after 0.3s")
        assert events == ["init", "finally"]  # tasks.cancel reached the environment


async def test_phase_limits_name_their_phase() -> None:
    async with LocalRuntime(env) as runtime:
        run = await rollout(
            slow_setup(seconds=30), solver, runtime=runtime, timeout=Timeouts(start=0.2)
        )
        assert_failed(run, "starting", "RolloutTimeout", "0.2s")
        run = await rollout(
            slow_grader(seconds=30), solver, runtime=runtime, timeout=Timeouts(grade=0.2)
        )
        assert_failed(run, "grading", "RolloutTimeout", "0.2s")
        run = await rollout(
            echo(text="a"), agent_from_fn(hang), runtime=runtime, timeout=Timeouts(agent=0.2)
        )
        # The agent's own deadline stops it, and it is graded on what it left (issue 13).
        assert (run.status, run.stop_reason, run.reward) == ("completed", "timeout", 0.0)
        assert events == ["init", "finally", "finally", "finally"]


async def test_inner_limit_reports_its_own_limit_under_a_rollout_deadline() -> None:
    run = await rollout(
        slow_setup(seconds=30),
        solver,
        runtime=LocalRuntime(env),
        timeout=Timeouts(rollout=30, start=0.2),
    )
    assert_failed(run, "starting", "RolloutTimeout", "after 0.2s")


async def test_an_agents_own_timeout_error_is_not_a_rollout_timeout() -> None:
    def model_call(prompt: str) -> str:
        raise TimeoutError("the model took too long")

    run = await rollout(
        echo(text="a"), agent_from_fn(model_call), runtime=LocalRuntime(env), timeout=30
    )
    assert_failed(run, "agent", "TimeoutError", "the model took too long")


async def test_rollout_deadline_does_not_cut_teardown_short() -> None:
    async def slowish(prompt: str) -> str:
        await asyncio.sleep(0.2)
        return prompt

    provider = Wrapped(exit_delay=0.4)
    run = await rollout(echo(text="a"), agent_from_fn(slowish), runtime=provider, timeout=0.4)
    assert run.status == "completed" and run.reward == 1.0, run.error
    assert provider.exited


def test_timeouts_construction() -> None:
    assert Timeouts.of(None) == Timeouts()
    assert Timeouts.of(2) == Timeouts(rollout=2.0)
    limits = Timeouts(agent=5)
    assert Timeouts.of(limits) is limits
    assert "agent=5" in repr(limits)
    for bad in ({"rollout": -1}, {"agent": float("nan")}, {"connect": None}, {"grade": "3"}):
        with pytest.raises(ValueError, match="Timeouts"):
            Timeouts(**bad)


# --- cancellation -----------------------------------------------------------------------------


async def test_cancelled_rollout_propagates_after_teardown() -> None:
    working = asyncio.Event()

    async def blocker(prompt: str) -> None:
        working.set()
        await asyncio.Event().wait()

    job = asyncio.create_task(
        rollout(echo(text="a"), agent_from_fn(blocker), runtime=LocalRuntime(env))
    )
    await working.wait()
    job.cancel()
    with pytest.raises(asyncio.CancelledError):
        await job
    assert events == ["init", "finally", "shutdown"]


async def test_a_second_cancellation_during_cleanup_still_stops_the_substrate() -> None:
    working = asyncio.Event()

    async def blocker(prompt: str) -> None:
        working.set()
        await asyncio.Event().wait()

    job = asyncio.create_task(
        rollout(slow_finally(seconds=0.3), agent_from_fn(blocker), runtime=LocalRuntime(env))
    )
    await working.wait()
    job.cancel()
    await reached["slow finally"].wait()  # inside tasks.cancel, waiting for the slow finally
    job.cancel()
    with pytest.raises(asyncio.CancelledError):
        await job
    assert events[-1] == "shutdown"
