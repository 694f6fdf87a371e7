"""Issue 8, finding 12: the official SDKs, at their default `max_retries`, never resend an
answer the proxy has made final (a resend would be a new turn against `max_turns`)."""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

import anthropic
import httpx2
import openai
import pytest

from proctor._http import HttpServer, Request, Response
from proctor.models import RetryPolicy
from proctor.proxy import InterceptionProxy, ModelLimits, Upstream
from proctor.testing import FakeClock, FakeModelServer, Fault

MESSAGES: Any = [{"role": "user", "content": "x"}]


class Sent:
    """Counts the HTTP requests an SDK client sends (each one reaches the proxy)."""

    def __init__(self) -> None:
        self.count = 0

    async def __call__(self, request: httpx2.Request) -> None:
        self.count += 1


@pytest.fixture
async def proxy(fake: FakeModelServer) -> AsyncIterator[InterceptionProxy]:
    policy = RetryPolicy(max_transport=3)
    async with InterceptionProxy(
        Upstream(fake.url), Upstream(fake.origin, "anthropic"), retry=policy, clock=FakeClock()
    ) as p:
        yield p


@pytest.fixture
async def sdks() -> AsyncIterator[list[openai.AsyncOpenAI | anthropic.AsyncAnthropic]]:
    clients: list[openai.AsyncOpenAI | anthropic.AsyncAnthropic] = []
    yield clients
    for client in clients:
        await client.close()


def oai(base_url: str, key: str, sent: Sent, clients: list[Any]) -> openai.AsyncOpenAI:
    hooks = {"request": [sent]}
    http = openai.DefaultAsyncHttpxClient(event_hooks=hooks)  # type: ignore[arg-type]
    client = openai.AsyncOpenAI(base_url=base_url, api_key=key, http_client=http)
    clients.append(client)
    return client


def ant(base_url: str, key: str, sent: Sent, clients: list[Any]) -> anthropic.AsyncAnthropic:
    hooks = {"request": [sent]}
    http = anthropic.DefaultAsyncHttpxClient(event_hooks=hooks)  # type: ignore[arg-type]
    client = anthropic.AsyncAnthropic(base_url=base_url, api_key=key, http_client=http)
    clients.append(client)
    return client


async def test_sdk_defaults_send_one_request_after_the_rollout_ended(
    proxy: InterceptionProxy, sdks: list[Any]
) -> None:
    session = proxy.open_session()
    session.close()
    sent = Sent()
    client = oai(session.base_url, session.secret, sent, sdks)
    assert client.max_retries == 2  # the SDK's default
    with pytest.raises(openai.ConflictError) as err:
        await client.chat.completions.create(model="m", messages=MESSAGES)
    assert sent.count == 1
    resp = err.value.response
    assert resp.headers["x-should-retry"] == "false"
    assert resp.headers["x-proctor-error"] == "rollout_ended"
    assert resp.json()["error"]["type"] == "rollout_ended_error"

    sent = Sent()
    root = session.base_url.removesuffix("/v1")
    with pytest.raises(anthropic.ConflictError) as aerr:
        await ant(root, session.secret, sent, sdks).messages.create(
            model="m", max_tokens=5, messages=MESSAGES
        )
    assert sent.count == 1
    assert aerr.value.response.headers["x-proctor-error"] == "rollout_ended"
    assert aerr.value.body["error"]["type"] == "rollout_ended_error"  # type: ignore[index]


async def test_a_502_after_giving_up_is_not_resent_and_is_one_turn(
    fake: FakeModelServer, proxy: InterceptionProxy, sdks: list[Any]
) -> None:
    session = proxy.open_session(limits=ModelLimits(max_turns=1))
    fake.inject(Fault.reset(mid_body=False), times=20)
    sent = Sent()
    with pytest.raises(openai.InternalServerError) as err:
        await oai(session.base_url, session.secret, sent, sdks).chat.completions.create(
            model="m", messages=MESSAGES
        )
    assert err.value.status_code == 502
    assert err.value.response.headers["x-should-retry"] == "false"
    assert err.value.response.headers["x-proctor-error"] == "upstream_error"
    assert sent.count == 1
    assert len(fake.requests) == 3  # max_transport, and nothing more
    assert len(session.turns) == 1 and session.admitted == 1
    assert session.stop_reason is None  # no resend ran into max_turns

    session = proxy.open_session(limits=ModelLimits(max_turns=1))
    sent = Sent()
    root = session.base_url.removesuffix("/v1")
    with pytest.raises(anthropic.InternalServerError):
        await ant(root, session.secret, sent, sdks).messages.create(
            model="m", max_tokens=5, messages=MESSAGES
        )
    assert sent.count == 1 and len(session.turns) == 1 and session.stop_reason is None


async def test_every_error_the_proxy_decides_is_final(
    fake: FakeModelServer, proxy: InterceptionProxy, sdks: list[Any]
) -> None:
    sent = Sent()
    client = oai(proxy.base_url, "sk-unknown", sent, sdks)
    with pytest.raises(openai.AuthenticationError) as auth:
        await client.chat.completions.create(model="m", messages=MESSAGES)
    assert auth.value.response.headers["x-should-retry"] == "false"
    assert auth.value.response.headers["x-proctor-error"] == "invalid_api_key"

    session = proxy.open_session(limits=ModelLimits(max_turns=0))
    client = oai(session.base_url, session.secret, sent, sdks)
    with pytest.raises(openai.BadRequestError) as limit:
        await client.chat.completions.create(model="m", messages=MESSAGES)
    assert limit.value.response.headers["x-proctor-error"] == "max_turns"
    assert limit.value.response.headers["x-should-retry"] == "false"
    assert sent.count == 2


async def test_an_upstream_409_the_proxy_gave_up_on_is_final(
    fake: FakeModelServer, proxy: InterceptionProxy, sdks: list[Any]
) -> None:
    session = proxy.open_session()
    fake.inject(Fault.status(409), times=3)  # a transport streak: the proxy gives up
    sent = Sent()
    client = oai(session.base_url, session.secret, sent, sdks)
    with pytest.raises(openai.ConflictError) as err:
        await client.chat.completions.create(model="m", messages=MESSAGES)
    assert sent.count == 1 and len(fake.requests) == 3
    headers = err.value.response.headers
    assert headers["x-should-retry"] == "false"
    assert "x-proctor-error" not in headers  # the provider's 409, not the proxy's
    assert err.value.response.json()["error"]["type"] != "rollout_ended_error"

    assert [len(t["attempts"]) for t in session.turns] == [3]


async def test_a_quota_429_the_proxy_does_not_retry_is_final(sdks: list[Any]) -> None:
    hits = 0

    async def quota(request: Request) -> Response:
        nonlocal hits
        hits += 1
        error = {"message": "You exceeded your quota.", "type": "insufficient_quota"}
        return Response.json({"error": {**error, "code": "insufficient_quota"}}, 429)

    async with HttpServer(quota) as up, InterceptionProxy(up.url + "/v1") as proxy:
        session = proxy.open_session()
        sent = Sent()
        client = oai(session.base_url, session.secret, sent, sdks)
        with pytest.raises(openai.RateLimitError) as err:
            await client.chat.completions.create(model="m", messages=MESSAGES)
        assert sent.count == 1 and hits == 1 and len(session.turns) == 1
        assert err.value.response.headers["x-should-retry"] == "false"
