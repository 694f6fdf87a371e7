"""The LLM judge: `Judge` talks to a real interception proxy in front of the fake model.

The proxy session stands for the one the driver opens for a grading phase: the judge
holds its secret only, the proxy records each call as a turn with its cost, and the
upstream (the fake model) sees the real key.
"""

from __future__ import annotations

import socket
from collections.abc import AsyncGenerator, AsyncIterator
from typing import Any

import pytest

from proctor import Environment, ModelError, ModelRequestError, Task, agent_from_fn, rollout
from proctor.env import graders
from proctor.env._judge import Judge
from proctor.proxy import InterceptionProxy, ProxySession, Upstream
from proctor.records import Trace
from proctor.runtimes import LocalRuntime
from proctor.testing import FakeModelServer

REAL_KEY = "sk-real-upstream-key-never-leaks"
RUBRIC = "Full marks for the right number, nothing else matters."


@pytest.fixture
async def proxy(fake: FakeModelServer) -> AsyncIterator[InterceptionProxy]:
    async with InterceptionProxy(Upstream(fake.url, api_key=REAL_KEY)) as p:
        yield p


@pytest.fixture
def session(proxy: InterceptionProxy) -> ProxySession:
    return proxy.open_session("grading", trace=Trace("grading"))


@pytest.fixture
def judge(session: ProxySession) -> Judge:
    made = Judge.from_params({"base_url": session.base_url, "api_key": session.secret})
    assert made is not None
    return made


@pytest.mark.parametrize("replies", [["The answer 4 is right.\nscore: 0.8"]])
async def test_a_judge_reward_scores_through_the_proxy_which_records_the_turn_and_its_cost(
    fake: FakeModelServer, session: ProxySession, judge: Judge
) -> None:
    reward = graders.judge("gpt-4.1-mini", RUBRIC)
    assert reward.__name__ == "judge"
    score = await reward(prompt="What is 2 + 2?", answer="4", task=None, judge=judge)
    assert score == pytest.approx(0.8)
    # The proxy session recorded the judge's call, with its cost.
    assert len(session.turns) == 1
    turn = session.turns[0]
    assert turn["status"] == 200 and turn["cost"] is not None and turn["cost"] > 0
    assert session.cost == pytest.approx(turn["cost"])
    assert session.trace is not None and session.trace.steps[-1].kind == "model_turn"
    # The model saw the task, the rubric and the answer.
    asked = fake.requests[-1].json
    assert asked["model"] == "gpt-4.1-mini"
    text = "\n".join(m["content"] for m in asked["messages"])
    assert "What is 2 + 2?" in text and RUBRIC in text and "## Answer\n4" in text


async def test_the_real_key_never_reaches_the_judge_side(
    fake: FakeModelServer, session: ProxySession, judge: Judge
) -> None:
    await judge.complete([{"role": "user", "content": "hello"}], model="gpt-4.1-mini")
    # The judge holds the session's secret; the proxy put the real key on the way up.
    assert judge.api_key == session.secret != REAL_KEY
    assert REAL_KEY not in repr(judge) and session.secret not in repr(judge)
    assert REAL_KEY not in str(fake.requests[-1].body)
    assert fake.requests[-1].headers.get("authorization") == f"Bearer {REAL_KEY}"


@pytest.mark.parametrize("replies", [["Mostly right. score: 7"]])
async def test_the_score_is_scaled_and_the_rubric_may_depend_on_the_task(
    fake: FakeModelServer, judge: Judge
) -> None:
    seen: list[Any] = []

    def rubric(task: Any) -> str:
        seen.append(task)
        return f"The reference answer is {task['solution']}."

    reward = graders.judge("gpt-4.1-mini", rubric, scale=(0, 10), name="proof")
    task = {"solution": "42"}
    assert await reward(prompt="p", answer="a", task=task, judge=judge) == pytest.approx(0.7)
    assert seen == [task] and reward.__name__ == "proof"
    assert "The reference answer is 42." in str(fake.requests[-1].json["messages"])
    assert "from 0 to 10" in fake.requests[-1].json["messages"][0]["content"]


@pytest.mark.parametrize("replies", [["I cannot decide.", "score: 1.5"]])
async def test_a_reply_without_a_score_or_outside_the_scale_is_an_error(judge: Judge) -> None:
    reward = graders.judge("gpt-4.1-mini", RUBRIC)
    with pytest.raises(ValueError, match="no score"):
        await reward(prompt="p", answer="a", task=None, judge=judge)
    with pytest.raises(ValueError, match="outside its scale"):
        await reward(prompt="p", answer="a", task=None, judge=judge)


async def test_a_custom_parser_reads_the_reply(judge: Judge) -> None:
    reward = graders.judge("gpt-4.1-mini", RUBRIC, parse=lambda reply: float("echo" in reply))
    assert await reward(prompt="p", answer="a", task=None, judge=judge) == 1.0


async def test_without_a_judge_the_reward_raises_a_clear_error() -> None:
    reward = graders.judge("gpt-4.1-mini", RUBRIC)
    with pytest.raises(RuntimeError, match="judge: no judge endpoint for this grading"):
        await reward(prompt="p", answer="a", task=None, judge=None)


def test_a_scale_must_go_up() -> None:
    with pytest.raises(ValueError, match="low to high"):
        graders.judge("m", RUBRIC, scale=(1, 1))


def test_judge_params() -> None:
    assert Judge.from_params(None) is None and Judge.from_params({}) is None
    judge = Judge.from_params({"base_url": "http://h/v1/", "api_key": "s", "model": "m"})
    assert judge == Judge("http://h/v1", "s", "m")
    for bad in ({"base_url": "http://h/v1"}, {"base_url": 1, "api_key": "s"}):
        with pytest.raises(ValueError, match="base_url and api_key"):
            Judge.from_params(bad)
    with pytest.raises(ValueError, match="model is a string"):
        Judge.from_params({"base_url": "http://h/v1", "api_key": "s", "model": 3})


async def test_the_judges_own_model_is_the_default(fake: FakeModelServer, session: ProxySession):
    judge = Judge(session.base_url, session.secret, "gpt-4.1-nano")
    assert await judge.complete([{"role": "user", "content": "x"}]) == "echo: x"
    assert fake.requests[-1].json["model"] == "gpt-4.1-nano"
    with pytest.raises(ValueError, match="no model"):
        await Judge(session.base_url, session.secret).complete([])


async def test_a_refused_call_is_a_model_request_error_and_is_not_retried(
    fake: FakeModelServer, proxy: InterceptionProxy, session: ProxySession, judge: Judge
) -> None:
    proxy.close_session(session)  # the grading phase ended: its secret gets 409
    with pytest.raises(ModelRequestError, match="HTTP 409") as caught:
        await judge.complete([{"role": "user", "content": "x"}], model="gpt-4.1-mini")
    assert caught.value.status == 409 and caught.value.cause == "refused"
    stranger = Judge(proxy.base_url, "sk-not-a-session", "gpt-4.1-mini")
    with pytest.raises(ModelRequestError, match="HTTP 401"):
        await stranger.complete([{"role": "user", "content": "x"}])
    assert fake.requests == []


async def test_an_unreachable_judge_is_a_model_error() -> None:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    judge = Judge(f"http://127.0.0.1:{port}/v1", "s", "m")
    with pytest.raises(ModelError, match="unreachable") as caught:
        await judge.complete([{"role": "user", "content": "x"}])
    assert caught.value.cause == "transport"


# -- end to end: a rollout whose grading phase gets a judge session ------------------


TASK = Task(env="judged", id="add", args={"a": 2, "b": 2})


def _judged_env(seen: list[Any]) -> Environment:
    env = Environment("judged")

    @env.template
    async def add(a: int, b: int) -> AsyncGenerator[str, str]:
        yield f"What is {a} + {b}?"

    env.reward(weight=1.0)(graders.judge("gpt-4.1-mini", RUBRIC))

    @env.metric
    def judge_seen(judge: Judge | None) -> float:
        seen.append(judge)
        return 0.0

    return env


@pytest.mark.parametrize("replies", [["score: 0.8"]])
async def test_a_rollout_with_a_judge_proxy_is_graded_by_the_model_and_pays_for_it(
    fake: FakeModelServer, proxy: InterceptionProxy
) -> None:
    seen: list[Any] = []
    env = _judged_env(seen)
    async with LocalRuntime(env) as runtime:
        run = await rollout(TASK, agent_from_fn(lambda p: "4"), runtime=runtime, judge=proxy)
    assert run.status == "completed" and not run.evaluation_failed, run.grade
    assert run.reward == pytest.approx(0.8)
    judged = [s for s in run.trace.steps if s.kind == "model_turn"]
    assert len(judged) == 1 and judged[0].data is not None and judged[0].data["judge"] is True
    assert run.cost is not None and run.cost > 0
    # The environment's side held the grading session's secret, never the real key.
    (judge,) = seen
    assert isinstance(judge, Judge) and judge.api_key.startswith("sk-proctor-")
    assert REAL_KEY not in repr(judge) and judge.api_key != REAL_KEY
    assert fake.requests[-1].headers.get("authorization") == f"Bearer {REAL_KEY}"
    assert proxy.sessions == []  # the grading session closed with the phase


async def test_without_a_judge_proxy_the_evaluation_fails_rather_than_scoring_zero() -> None:
    env = _judged_env([])
    async with LocalRuntime(env) as runtime:
        run = await rollout(TASK, agent_from_fn(lambda p: "4"), runtime=runtime)
    assert run.status == "completed" and run.evaluation_failed
    assert run.grade is not None
    assert run.grade.info["errors"]["judge"].startswith("RuntimeError: judge: no judge endpoint")
