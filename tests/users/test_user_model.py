"""`rollout(..., user=)`: a `ModelUser` without an endpoint asks the run's user model, a
proxy session the driver opens before `tasks.start` (the environment sees only its
secret); its turns land on the trace marked as the user's, priced on the run and kept
out of samples; a `dialogue` reward sees both sides."""

from __future__ import annotations

from collections.abc import AsyncGenerator, AsyncIterator, Sequence
from typing import Any

import pytest

from proctor import Environment, Run, rollout
from proctor.agents import UserClient
from proctor.env import Message, ModelUser, scripted
from proctor.proxy import InterceptionProxy, Upstream
from proctor.samples import ModelTurn
from proctor.testing import FakeModelServer, FakeRequest

REAL_KEY = "sk-real-user-model-key-never-sent"

env = Environment("talked")
users = env.add_user()
seen: dict[str, Any] = {}


@env.template
async def ask(topic: str) -> AsyncGenerator[Any, Any]:
    customer = ModelUser(persona=f"someone curious about {topic}", goal="learn one fact")
    seen["user_model"] = customer._episode and customer._episode.user_model
    dialogue = users.open(customer)
    yield {"prompt": f"Talk about {topic}.", "bindings": {"user": dialogue.binding}}


@ask.reward
def both_sides(dialogue: Sequence[Message]) -> float:
    seen["dialogue"] = [(m.role, m.text) for m in dialogue]
    return 1.0 if {m.role for m in dialogue} == {"agent", "user"} else 0.0


@env.template
async def scripted_ask() -> AsyncGenerator[Any, Any]:
    dialogue = users.open(scripted(["fine"]), opening="hello")
    yield {"prompt": "Greet.", "bindings": {"user": dialogue.binding}}


@scripted_ask.reward
def heard(dialogue: Sequence[Message]) -> float:
    seen["dialogue"] = [(m.role, m.text) for m in dialogue]
    return 1.0


plain_env = Environment("untalked")


@plain_env.template
async def plain() -> AsyncGenerator[Any, Any]:
    yield "say hi"
    yield 1.0


def customer(request: FakeRequest) -> str:
    heard = sum(1 for m in request.messages if m["role"] == "user")
    return "What is a fact?" if heard == 1 else "Thanks! ###DONE###"


@pytest.fixture(autouse=True)
def _clear() -> None:
    seen.clear()


@pytest.fixture
async def user_model() -> AsyncIterator[InterceptionProxy]:
    async with (
        FakeModelServer(customer) as fake,
        InterceptionProxy(Upstream(fake.url, api_key=REAL_KEY, model="gpt-4.1-mini")) as proxy,
    ):
        yield proxy


async def talk(run: Run) -> None:
    client = UserClient(run.binding("user"), trace=run.trace)
    assert await client.send("Hello, how can I help?") == "What is a fact?"
    assert await client.send("Water boils at 100 C.") is None
    run.trace.content = "done"


async def test_the_model_user_talks_through_the_runs_own_session(
    user_model: InterceptionProxy,
) -> None:
    run = await rollout(ask(topic="water"), talk, user=user_model)
    assert run.error is None, run.error
    assert run.reward == 1.0
    params = seen["user_model"]
    assert params["base_url"].endswith("/v1") and params["model"] == "gpt-4.1-mini"
    assert params["api_key"].startswith("sk-proctor-") and params["api_key"] != REAL_KEY
    assert seen["dialogue"] == [
        ("agent", "Hello, how can I help?"),
        ("user", "What is a fact?"),
        ("agent", "Water boils at 100 C."),
    ]
    turns = [s for s in run.trace.steps if s.kind == "model_turn"]
    assert len(turns) == 2 and all(t.data and t.data["user"] is True for t in turns)
    assert run.cost is not None and run.cost > 0  # the user model's turns are the run's
    assert all(ModelTurn.from_step(t) is None for t in turns)  # never trained on
    assert REAL_KEY not in str(run.to_dict())
    assert run.user is None and user_model.sessions == []  # closed at teardown


async def test_a_scripted_user_gets_the_dialogue_too(user_model: InterceptionProxy) -> None:
    async def greet(run: Run) -> None:
        await UserClient(run.binding("user")).send("hi")

    run = await rollout(scripted_ask(), greet, user=user_model)
    assert run.reward == 1.0, run.error
    assert seen["dialogue"] == [("user", "hello"), ("agent", "hi"), ("user", "fine")]


async def test_an_environment_without_users_gets_no_session(
    user_model: InterceptionProxy,
) -> None:
    opened: list[str] = []
    open_session = user_model.open_session

    def spy(*args: Any, **kwargs: Any) -> Any:
        opened.append(str(args))
        return open_session(*args, **kwargs)

    user_model.open_session = spy  # type: ignore[method-assign]

    async def hi(run: Run) -> None:
        run.trace.content = "hi"

    run = await rollout(plain(), hi, user=user_model)
    assert run.reward == 1.0 and opened == [] and run.user is None


async def test_a_model_user_without_a_user_model_says_what_to_pass() -> None:
    async def talk_once(run: Run) -> None:
        await UserClient(run.binding("user")).send("hello")

    run = await rollout(ask(topic="salt"), talk_once)
    assert run.error is not None and run.error.phase == "agent"
    assert "--user-model" in run.error.message and "endpoint=" in run.error.message
