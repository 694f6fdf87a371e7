"""An agent stopped by its deadline or a budget is graded on what it left (issue 13).

A harness that exits non-zero because the proxy refused it a turn (mini-swe-agent
does) is stopped, not crashed; one that crashes on its own still fails in `agent`.
"""

from __future__ import annotations

import asyncio
import sys
import urllib.error
import urllib.request
from collections.abc import AsyncGenerator, AsyncIterator
from typing import Any

import orjson
import pytest

from proctor import Environment, Run, rollout
from proctor.agents import CommandAgent
from proctor.engine import Timeouts
from proctor.proxy import InterceptionProxy, ModelLimits, SharedBudget, Upstream
from proctor.testing import FakeModelServer

env = Environment("graded-on-stop")
heard: list[dict[str, Any]] = []


@env.template
async def words(count: int) -> AsyncGenerator[Any, Any]:
    """Reward: the share of `count` words the answer holds."""
    answer = yield f"say {count} words, one per model turn"
    yield min(len(str(answer or "").split()), count) / count


@words.metric
def stop(stop_reason: str | None) -> float:
    heard.append({"stop_reason": stop_reason})
    return 0.0


# A harness in the style of mini-swe-agent: one word per model turn; a refused turn
# (the proxy's 4xx for a budget) ends it with exit status 1, after printing its work.
HARNESS = """
import json, os, sys, urllib.error, urllib.request
said = []
for _ in range(10):
    request = urllib.request.Request(
        os.environ["OPENAI_BASE_URL"] + "/chat/completions",
        data=json.dumps({"model": "gpt-4.1-mini",
                         "messages": [{"role": "user", "content": "a word"}]}).encode(),
        headers={"Authorization": "Bearer " + os.environ["OPENAI_API_KEY"],
                 "Content-Type": "application/json"},
    )
    try:
        reply = json.load(urllib.request.urlopen(request))
    except urllib.error.HTTPError as exc:
        print(" ".join(said))
        sys.exit(f"LimitsExceeded: {exc.code}")
    said.append(reply["choices"][0]["message"]["content"])
print(" ".join(said))
"""


@pytest.fixture(autouse=True)
def _clear() -> None:
    heard.clear()


@pytest.fixture
async def fake() -> AsyncIterator[FakeModelServer]:
    async with FakeModelServer(lambda _: "word") as server:
        yield server


def harness() -> CommandAgent:
    return CommandAgent([sys.executable, "-c", HARNESS], jail=False)


async def test_a_harness_exiting_on_a_refused_turn_is_graded_on_its_output(
    fake: FakeModelServer,
) -> None:
    async with InterceptionProxy(Upstream(fake.url)) as proxy:
        run = await rollout(words(count=4), harness(), proxy=proxy, limits=ModelLimits(max_turns=2))
    assert (run.status, run.error) == ("completed", None)
    assert run.stop_reason == "max_turns"
    assert run.answer == "word word" and run.reward == 0.5
    assert heard == [{"stop_reason": "max_turns"}]  # sent with tasks.grade
    last = [s for s in run.trace.steps if s.kind == "assistant"][-1]
    assert last.data is not None and last.data["exit_code"] == 1
    assert last.data["stop_reason"] == "max_turns" and "LimitsExceeded" in last.data["stderr"]


async def test_a_spent_shared_cost_cap_stops_it_too(fake: FakeModelServer) -> None:
    async with InterceptionProxy(Upstream(fake.url), budget=SharedBudget(0.0)) as proxy:
        run = await rollout(words(count=4), harness(), proxy=proxy)
    assert (run.status, run.stop_reason, run.answer, run.reward) == (
        "completed",
        "batch_cost_cap",
        "",
        0.0,
    )


async def test_an_agent_raising_after_a_refusal_is_graded(fake: FakeModelServer) -> None:
    def ask(url: str, key: str) -> None:
        body = orjson.dumps({"model": "m", "messages": [{"role": "user", "content": "hi"}]})
        headers = {"Authorization": f"Bearer {key}", "Content-Type": "application/json"}
        try:
            urllib.request.urlopen(urllib.request.Request(url, body, headers)).close()
        except urllib.error.HTTPError as exc:
            exc.close()
            raise RuntimeError(f"model call refused: {exc.code}") from None

    async def agent(run: Run) -> None:
        env = run.model_env
        url = env["OPENAI_BASE_URL"] + "/chat/completions"
        await asyncio.to_thread(ask, url, env["OPENAI_API_KEY"])
        run.answer = "so far"
        await asyncio.to_thread(ask, url, env["OPENAI_API_KEY"])  # refused: HTTPError

    async with InterceptionProxy(Upstream(fake.url)) as proxy:
        run = await rollout(words(count=4), agent, proxy=proxy, limits=ModelLimits(max_turns=1))
    assert (run.status, run.stop_reason, run.reward) == ("completed", "max_turns", 0.5)


async def test_a_harness_crash_without_a_budget_still_fails_in_agent(
    fake: FakeModelServer,
) -> None:
    crash = CommandAgent([sys.executable, "-c", "print('half'); raise SystemExit(1)"], jail=False)
    async with InterceptionProxy(Upstream(fake.url)) as proxy:
        run = await rollout(words(count=4), crash, proxy=proxy)
    assert run.status == "failed" and run.error is not None
    assert (run.error.phase, run.stop_reason, run.reward) == ("agent", None, None)


async def test_an_agent_raising_without_a_proxy_still_fails_in_agent() -> None:
    async def agent(run: Run) -> None:
        run.answer = "one two"
        raise RuntimeError("broken agent")

    run = await rollout(words(count=2), agent)
    assert run.error is not None and (run.error.phase, run.error.type) == ("agent", "RuntimeError")


async def test_the_agent_deadline_stops_it_and_it_is_graded_on_what_it_left() -> None:
    async def slow(run: Run) -> None:
        run.answer = "one two three"
        await asyncio.Event().wait()

    run = await rollout(words(count=6), slow, timeout=Timeouts(agent=0.2))
    assert (run.status, run.error, run.stop_reason, run.reward) == (
        "completed",
        None,
        "timeout",
        0.5,
    )
    assert heard == [{"stop_reason": "timeout"}]
    assert run.to_dict()["stop_reason"] == "timeout"


async def test_the_rollout_deadline_still_fails_the_run() -> None:
    async def slow(run: Run) -> None:
        run.answer = "one"
        await asyncio.Event().wait()

    run = await rollout(words(count=2), slow, timeout=Timeouts(rollout=0.3))
    assert run.status == "failed" and run.error is not None
    assert (run.error.phase, run.error.type) == ("agent", "RolloutTimeout")
