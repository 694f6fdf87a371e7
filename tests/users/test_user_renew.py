"""A continued rollout's simulated user asks the resuming driver's user model: the
driver that started the task died with its proxy session, so the one that adopts the
parked session opens its own and hands it over with `tasks.user` (docs/wire.md)."""

from __future__ import annotations

import asyncio
import dataclasses
from collections.abc import AsyncGenerator, AsyncIterator
from typing import Any

import orjson
import pytest

from proctor import Environment, Run
from proctor.agents import JudgeEndpoint, UserClient
from proctor.channel import EnvServer, connect
from proctor.engine import Adoption, execute_run
from proctor.env import ModelUser
from proctor.proxy import InterceptionProxy, Upstream
from proctor.testing import FakeModelServer

KEY = "sk-real-user-model-key-never-sent"

env = Environment("renewed")
users = env.add_user()


@env.template
async def chat() -> AsyncGenerator[Any, Any]:
    dialogue = users.open(ModelUser(persona="a customer", goal="get help"))
    yield {"prompt": "Help the customer.", "bindings": {"user": dialogue.binding}}
    said = [m.text for m in dialogue.messages if m.role == "user"]
    yield 1.0 if said == ["first driver here", "second driver here"] else 0.0


@pytest.fixture
async def served() -> AsyncIterator[str]:
    await env.start()  # its user server
    server = EnvServer(env)
    host, port = await server.listen()
    try:
        yield f"tcp://{host}:{port}"
    finally:
        await server.aclose()
        await env.stop()


def _proxy(fake: FakeModelServer) -> InterceptionProxy:
    return InterceptionProxy(Upstream(fake.url, api_key=KEY, model="gpt-4.1-mini"))


async def test_an_adopted_session_asks_the_resuming_drivers_user_model(served: str) -> None:
    async with (
        FakeModelServer(lambda request: "first driver here") as first_model,
        FakeModelServer(lambda request: "second driver here") as second_model,
        _proxy(second_model) as second,
    ):
        async with _proxy(first_model) as first:  # the first driver, which dies
            session = first.open_session("dead-user")
            endpoint = JudgeEndpoint(session.base_url, session.secret, "gpt-4.1-mini")
            async with connect(served) as client:
                started = await client.start_task("chat", {}, user=endpoint.to_params())
                manifest = client.manifest
                assert manifest is not None and manifest.resume_token is not None
                cap = client.binding("user")
                cap = dataclasses.replace(cap, params={**cap.params, **started["bindings"]["user"]})
                talk = UserClient(cap)
                assert await talk.send("Hello?") == "first driver here"
            # the connection drops mid-task (parked), then the driver's proxy goes

        async def again(run: Run) -> None:
            reply = await UserClient(run.binding("user"), trace=run.trace).send("Still there?")
            run.trace.content = reply

        run = Run(chat())
        adopt = Adoption(served, None, manifest.session_id, manifest.resume_token,
                         prompt=started["prompt"], start_result=started)  # fmt: skip
        await execute_run(run, again, adopt=adopt, user=second, timeout=60)
        assert run.error is None, run.error
        assert run.trace.content == "second driver here" and run.reward == 1.0
        turns = [s for s in run.trace.steps if s.kind == "model_turn"]
        assert len(turns) == 1 and turns[0].data and turns[0].data["user"] is True
        assert run.cost is not None and run.cost > 0  # priced on the continued run
        assert run.user is None and second.sessions == []  # closed at teardown


async def test_tasks_user_on_the_wire(served: str) -> None:
    host, port = served.removeprefix("tcp://").rsplit(":", 1)
    reader, writer = await asyncio.open_connection(host, int(port))

    async def call(rid: int, method: str, params: Any) -> bytes:
        frame = {"jsonrpc": "2.0", "id": rid, "method": method, "params": params}
        writer.write(orjson.dumps(frame) + b"\n")
        await writer.drain()
        return await asyncio.wait_for(reader.readline(), 30)

    try:
        assert await call(1, "tasks.user", {"user": None}) == (
            b'{"jsonrpc":"2.0","id":1,"error":{"code":-32600,"message":"no task in progress"}}\n'
        )
        assert b'"result"' in await call(2, "tasks.start", {"id": "chat"})
        assert await call(3, "tasks.user", {"user": "sk-a-bare-key"}) == (
            b'{"jsonrpc":"2.0","id":3,"error":{"code":-32602,'
            b'"message":"tasks.user: need {user: object or null}"}}\n'
        )
        endpoint = {"base_url": "http://127.0.0.1:9/v1", "api_key": "sk-proctor-x"}
        assert await call(4, "tasks.user", {"user": endpoint}) == (
            b'{"jsonrpc":"2.0","id":4,"result":{"renewed":true}}\n'
        )
    finally:
        writer.close()
