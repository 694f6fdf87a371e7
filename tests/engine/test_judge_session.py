"""`rollout(..., judge=)`: a proxy session for the grading phase only, sent to the
graders that ask for it; its turns land on the run's trace marked as the judge's."""

from __future__ import annotations

import asyncio
import urllib.error
import urllib.request
from collections.abc import AsyncGenerator, AsyncIterator
from typing import Any

import orjson
import pytest

from proctor import Environment, Run, Taskset, rollout
from proctor.engine import run_taskset
from proctor.proxy import InterceptionProxy, Upstream
from proctor.testing import FakeModelServer

REAL_KEY = "sk-real-upstream-key-never-sent"

env = Environment("judged")
seen: dict[str, Any] = {}


@env.template
async def poem(topic: str) -> AsyncGenerator[Any, Any]:
    yield f"write a poem about {topic}"


def post(base_url: str, key: str) -> dict[str, Any]:
    """One chat completion, as a grader without an SDK would ask it."""
    body = orjson.dumps(
        {"model": "gpt-4.1-mini", "messages": [{"role": "user", "content": "0.75"}]}
    )
    headers = {"Authorization": f"Bearer {key}", "Content-Type": "application/json"}
    request = urllib.request.Request(base_url + "/chat/completions", body, headers)
    with urllib.request.urlopen(request) as response:
        reply: dict[str, Any] = orjson.loads(response.read())
    return reply


@poem.reward
async def judged(judge: Any, answer: Any, trace: list[dict[str, Any]]) -> float:
    seen.update(judge=judge, trace=trace)
    if judge is None:
        return 0.0
    reply = await asyncio.to_thread(post, judge.base_url, judge.api_key)
    return float(reply["choices"][0]["message"]["content"])


@env.template
async def plain() -> AsyncGenerator[Any, Any]:
    yield "say hi"
    yield 1.0


@pytest.fixture(autouse=True)
def _clear() -> None:
    seen.clear()


@pytest.fixture
async def judge() -> AsyncIterator[InterceptionProxy]:
    async with (
        FakeModelServer(lambda request: request.messages[-1]["content"]) as fake,
        InterceptionProxy(Upstream(fake.url, api_key=REAL_KEY)) as proxy,
    ):
        yield proxy


async def answer(run: Run) -> None:
    assert run.judge is None  # the agent never holds the judge
    run.trace.add("assistant", "roses")
    run.answer = "roses"


async def test_the_judge_grades_through_its_own_session(judge: InterceptionProxy) -> None:
    run = await rollout(poem(topic="spring"), answer, judge=judge)
    assert run.error is None, run.error
    assert run.reward == 0.75
    assert seen["judge"].base_url.endswith("/v1")
    assert seen["judge"].api_key.startswith("sk-proctor-") and seen["judge"].api_key != REAL_KEY
    turns = [s for s in run.trace.steps if s.kind == "model_turn"]
    assert len(turns) == 1 and turns[0].data is not None and turns[0].data["judge"] is True
    assert run.cost is not None and run.cost > 0  # the judge's turn is the run's cost
    assert REAL_KEY not in str(run.to_dict())
    assert run.judge is None and judge.sessions == []  # closed after grading


async def test_the_judge_session_is_closed_after_grading(judge: InterceptionProxy) -> None:
    await rollout(poem(topic="rain"), answer, judge=judge)
    late = seen["judge"]
    with pytest.raises(urllib.error.HTTPError) as refused:
        await asyncio.to_thread(post, late.base_url, late.api_key)
    refused.value.close()
    assert refused.value.code == 409


async def test_the_trace_sent_holds_only_conversational_steps(judge: InterceptionProxy) -> None:
    async def talker(run: Run) -> None:
        run.trace.add("tool_call", {"name": "look"}, id="c1")
        run.trace.add("tool_result", "a garden", id="c1")
        run.trace.add("model_turn", {"secret": "body"}, usage={})
        await answer(run)

    await rollout(poem(topic="gardens"), talker, judge=judge)
    assert [(s["kind"], s["content"]) for s in seen["trace"]] == [
        ("user", "write a poem about gardens"),
        ("tool_call", {"name": "look"}),
        ("tool_result", "a garden"),
        ("assistant", "roses"),
    ]
    assert seen["trace"][1]["data"] == {"id": "c1"}


async def test_without_a_judge_proxy_the_grader_gets_none() -> None:
    run = await rollout(poem(topic="snow"), answer)
    assert seen["judge"] is None and run.reward == 0.0


async def test_a_task_that_needs_no_judge_opens_a_session_it_never_uses(
    judge: InterceptionProxy,
) -> None:
    run = await rollout(plain(), answer, judge=judge)
    assert run.reward == 1.0
    assert not [s for s in run.trace.steps if s.kind == "model_turn"]


async def test_run_taskset_gives_each_grading_its_own_judge_session(
    judge: InterceptionProxy,
) -> None:
    tasks = Taskset("poems", [poem(topic="sea"), poem(topic="sky")])
    job = await run_taskset(tasks, answer, judge=judge, group=2, max_concurrent=4)
    assert [run.reward for run in job.runs] == [0.75] * 4
    for run in job.runs:  # one judge turn each, on its own trace
        turns = [s for s in run.trace.steps if s.kind == "model_turn"]
        assert len(turns) == 1 and turns[0].data is not None and turns[0].data["judge"]


async def test_the_judge_names_the_model_its_proxy_pins() -> None:
    async with (
        FakeModelServer(lambda request: "0.5") as fake,
        InterceptionProxy(Upstream(fake.url, model="gpt-4.1-mini")) as pinned,
    ):
        run = await rollout(poem(topic="fog"), answer, judge=pinned)
    assert run.reward == 0.5 and seen["judge"].model == "gpt-4.1-mini"
