"""`rollout(..., proxy=)`: a harness in another process, metered through the proxy."""

from __future__ import annotations

import sys
from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from proctor import Environment, rollout
from proctor.agents import CommandAgent
from proctor.proxy import InterceptionProxy, ModelLimits, Upstream
from proctor.testing import FakeModelServer

HARNESS = [sys.executable, str(Path(__file__).with_name("harness.py"))]
REAL_KEY = "sk-real-key-for-the-upstream-only"

env = Environment("proxied")


@env.template
async def say(word: str):
    answer = yield f"say {word}"
    yield 1.0 if word in str(answer) else 0.0


@pytest.fixture
async def proxy() -> AsyncIterator[InterceptionProxy]:
    async with (
        FakeModelServer() as fake,
        InterceptionProxy(Upstream(fake.url, api_key=REAL_KEY)) as p,
    ):
        yield p


async def test_harness_turns_land_on_the_run_trace(
    proxy: InterceptionProxy, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("OPENAI_API_KEY", REAL_KEY)  # the parent's real key must not leak
    monkeypatch.setenv("SOME_SERVICE_TOKEN", "tok")
    agent = CommandAgent(HARNESS, env={"HARNESS_TURNS": "3"}, answer="json")
    run = await rollout(say(word="apple"), agent, proxy=proxy)
    assert run.error is None, run.error
    out = run.answer
    assert "apple" in out["answer"]
    assert out["key"] != REAL_KEY and out["key"].startswith("sk-proctor-")
    assert out["leaked"] == []
    turns = [s for s in run.trace.steps if s.kind == "model_turn"]
    assert len(turns) == 3
    assert run.usage["output_tokens"] > 0 and run.cost is not None
    assert REAL_KEY not in str(run.to_dict())
    assert run.proxy_session is not None and run.proxy_session.closed


async def test_budget_stop_reason_reaches_the_run(proxy: InterceptionProxy) -> None:
    agent = CommandAgent(HARNESS, env={"HARNESS_TURNS": "5"}, answer="json")
    run = await rollout(say(word="pear"), agent, proxy=proxy, limits=ModelLimits(max_turns=2))
    assert run.error is None
    assert run.stop_reason == "max_turns"
    assert len([s for s in run.trace.steps if s.kind == "model_turn"]) == 2
    assert run.to_dict()["stop_reason"] == "max_turns"


async def test_failing_harness_is_a_failed_run_in_the_agent_phase(
    proxy: InterceptionProxy,
) -> None:
    agent = CommandAgent([sys.executable, "-c", "import sys; sys.exit('boom')"])
    run = await rollout(say(word="x"), agent, proxy=proxy)
    assert run.error is not None and run.error.phase == "agent"
    assert "boom" in run.error.message


async def test_taskset_run_gives_each_rollout_its_own_session(proxy: InterceptionProxy) -> None:
    from proctor import Taskset

    tasks = Taskset("words", [say(word=w) for w in ("a", "b", "c", "d")])
    job = await tasks.run(CommandAgent(HARNESS, answer="json"), proxy=proxy, group=2)
    assert job.stats.errors == 0
    secrets = {r.answer["key"] for r in job.runs}
    assert len(secrets) == 8
    for r in job.runs:
        turns = [s for s in r.trace.steps if s.kind == "model_turn"]
        assert len(turns) == 1
        assert turns[0].data is not None
        assert f"say {r.task.args['word']}" in str(turns[0].data["request"])
