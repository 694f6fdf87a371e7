"""The interception proxy, driven by the official SDKs against a fake upstream."""

from __future__ import annotations

import asyncio
import json
import logging
from collections.abc import AsyncIterator

import anthropic
import openai
import pytest

from proctor._http import HttpClient, HttpServer, Request, Response
from proctor.models import RetryPolicy
from proctor.proxy import InterceptionProxy, ModelLimits, Upstream
from proctor.records import Trace
from proctor.testing import FakeClock, FakeModelServer, Fault

REAL_KEY = "sk-real-upstream-key-never-leaks"


@pytest.fixture
async def proxy(fake: FakeModelServer) -> AsyncIterator[InterceptionProxy]:
    async with InterceptionProxy(
        Upstream(fake.url, api_key=REAL_KEY),
        Upstream(fake.origin, "anthropic", api_key=REAL_KEY),
        clock=FakeClock(),
    ) as p:
        yield p


_CLIENTS: list[openai.AsyncOpenAI | anthropic.AsyncAnthropic] = []


@pytest.fixture(autouse=True)
async def _close_sdk_clients() -> AsyncIterator[None]:
    yield
    while _CLIENTS:
        await _CLIENTS.pop().close()


def oai(base_url: str, key: str) -> openai.AsyncOpenAI:
    client = openai.AsyncOpenAI(base_url=base_url, api_key=key, max_retries=0)
    _CLIENTS.append(client)
    return client


def ant(base_url: str, key: str) -> anthropic.AsyncAnthropic:
    client = anthropic.AsyncAnthropic(base_url=base_url, api_key=key, max_retries=0)
    _CLIENTS.append(client)
    return client


async def test_chat_turn_is_forwarded_recorded_and_attributed(
    fake: FakeModelServer, proxy: InterceptionProxy
) -> None:
    trace = Trace("t1")
    session = proxy.open_session("r1", trace=trace)
    client = oai(session.base_url, session.secret)
    out = await client.chat.completions.create(
        model="gpt-4.1-mini", messages=[{"role": "user", "content": "hi there"}]
    )
    assert out.choices[0].message.content == "echo: hi there"
    assert len(session.turns) == 1
    turn = session.turns[0]
    assert turn["api"] == "chat" and turn["status"] == 200 and turn["error"] is None
    assert turn["request"]["messages"][0]["content"] == "hi there"
    assert turn["usage"]["output_tokens"] == out.usage.completion_tokens  # type: ignore[union-attr]
    assert turn["cost"] is not None and turn["cost"] > 0  # gpt-4.1-mini is priced
    assert [a["cause"] for a in turn["attempts"]] == ["ok"]
    step = trace.steps[-1]
    assert step.kind == "model_turn" and step.content["content"] == "echo: hi there"
    # The upstream saw the real key; the harness only ever held the secret.
    assert fake.requests[-1].headers.get("authorization") == f"Bearer {REAL_KEY}"
    assert session.secret != REAL_KEY


async def test_unknown_or_missing_secret_is_401(proxy: InterceptionProxy) -> None:
    proxy.open_session()
    with pytest.raises(openai.AuthenticationError) as err:
        await oai(proxy.base_url, "sk-wrong").chat.completions.create(
            model="m", messages=[{"role": "user", "content": "x"}]
        )
    assert err.value.status_code == 401
    assert err.value.body["code"] == "invalid_api_key"  # type: ignore[index]


async def test_ended_rollout_gets_409(proxy: InterceptionProxy) -> None:
    session = proxy.open_session()
    client = oai(session.base_url, session.secret)
    await client.chat.completions.create(model="m", messages=[{"role": "user", "content": "a"}])
    proxy.close_session(session)
    with pytest.raises(openai.ConflictError) as err:
        await client.chat.completions.create(model="m", messages=[{"role": "user", "content": "b"}])
    assert err.value.status_code == 409
    assert len(session.turns) == 1


async def test_max_turns_answers_openai_shaped_400_and_sets_stop_reason(
    proxy: InterceptionProxy,
) -> None:
    session = proxy.open_session(limits=ModelLimits(max_turns=2))
    client = oai(session.base_url, session.secret)
    for _ in range(2):
        await client.chat.completions.create(model="m", messages=[{"role": "user", "content": "a"}])
    with pytest.raises(openai.BadRequestError) as err:
        await client.chat.completions.create(model="m", messages=[{"role": "user", "content": "a"}])
    body = err.value.body
    assert isinstance(body, dict)
    assert body["code"] == "max_turns" and body["type"] == "invalid_request_error"
    assert "max_turns" in body["message"]
    assert session.stop_reason == "max_turns"
    assert len(session.turns) == 2


@pytest.mark.parametrize(
    ("limits", "reason"),
    [
        (ModelLimits(max_output_tokens=1), "max_output_tokens"),
        (ModelLimits(max_input_tokens=1), "max_input_tokens"),
        (ModelLimits(max_total_tokens=1), "max_total_tokens"),
        (ModelLimits(max_cost=1e-12), "max_cost"),
    ],
)
async def test_token_and_cost_budgets(
    proxy: InterceptionProxy, limits: ModelLimits, reason: str
) -> None:
    session = proxy.open_session(limits=limits)
    client = oai(session.base_url, session.secret)
    # The turn that crosses a budget completes; the next one is refused.
    await client.chat.completions.create(
        model="gpt-4.1-mini", messages=[{"role": "user", "content": "hello"}]
    )
    assert session.stop_reason == reason
    with pytest.raises(openai.BadRequestError) as err:
        await client.chat.completions.create(
            model="gpt-4.1-mini", messages=[{"role": "user", "content": "again"}]
        )
    assert err.value.body["code"] == reason  # type: ignore[index]
    assert len(session.turns) == 1


async def test_stream_is_passed_through_and_recorded_at_the_end(
    fake: FakeModelServer, proxy: InterceptionProxy
) -> None:
    trace = Trace("s")
    session = proxy.open_session(trace=trace)
    client = oai(session.base_url, session.secret)
    stream = await client.chat.completions.create(
        model="gpt-4.1-mini",
        messages=[{"role": "user", "content": "stream me please"}],
        stream=True,
    )
    text = ""
    async for chunk in stream:
        if chunk.choices and chunk.choices[0].delta.content:
            text += chunk.choices[0].delta.content
    assert text == "echo: stream me please"
    turn = session.turns[0]
    assert turn["stream"] is True and turn["error"] is None
    assert turn["usage"]["output_tokens"] > 0  # metered: include_usage was requested for it
    assert turn["message"]["content"] == text
    assert fake.requests[-1].json["stream_options"] == {"include_usage": True}


async def test_stream_events_reach_the_harness_before_the_upstream_finishes() -> None:
    """True pass-through: the first event arrives while the upstream is still waiting."""
    release = asyncio.Event()

    async def upstream(req: Request) -> Response:
        async def events() -> AsyncIterator[bytes]:
            chunk = {"id": "c", "object": "chat.completion.chunk", "created": 0, "model": "m"}
            first = {**chunk, "choices": [{"index": 0, "delta": {"content": "a"}}]}
            yield b"data: " + json.dumps(first).encode() + b"\n\n"
            await release.wait()
            last = {**chunk, "choices": [{"index": 0, "delta": {}, "finish_reason": "stop"}]}
            yield b"data: " + json.dumps(last).encode() + b"\n\ndata: [DONE]\n\n"

        return Response(200, [("content-type", "text/event-stream")], events())

    async with (
        HttpServer(upstream) as up,
        InterceptionProxy(up.url + "/v1") as proxy,
    ):
        session = proxy.open_session()
        stream = await oai(session.base_url, session.secret).chat.completions.create(
            model="m", messages=[{"role": "user", "content": "x"}], stream=True
        )
        seen = []
        async with asyncio.timeout(5):
            async for chunk in stream:
                seen.append(chunk)
                release.set()  # only now may the upstream finish
        assert len(seen) == 2
        assert session.turns[0]["message"]["content"] == "a"


async def test_responses_api_plain_and_streamed(proxy: InterceptionProxy) -> None:
    session = proxy.open_session()
    client = oai(session.base_url, session.secret)
    out = await client.responses.create(model="gpt-4.1-mini", input="ping")
    assert out.output_text == "echo: ping"
    stream = await client.responses.create(model="gpt-4.1-mini", input="pong", stream=True)
    kinds = [event.type async for event in stream]
    assert kinds[-1] == "response.completed"
    assert [t["api"] for t in session.turns] == ["responses", "responses"]
    assert all(t["usage"]["input_tokens"] > 0 for t in session.turns)


async def test_anthropic_messages_with_x_api_key(
    fake: FakeModelServer, proxy: InterceptionProxy
) -> None:
    session = proxy.open_session()
    client = ant(session.env["ANTHROPIC_BASE_URL"], session.env["ANTHROPIC_API_KEY"])
    out = await client.messages.create(
        model="claude-haiku-4-5", max_tokens=64, messages=[{"role": "user", "content": "hey"}]
    )
    assert out.content[0].text == "echo: hey"  # type: ignore[union-attr]
    async with client.messages.stream(
        model="claude-haiku-4-5", max_tokens=64, messages=[{"role": "user", "content": "yo"}]
    ) as stream:
        text = await stream.get_final_text()
    assert text == "echo: yo"
    assert [t["api"] for t in session.turns] == ["messages", "messages"]
    assert fake.requests[-1].headers.get("x-api-key") == REAL_KEY
    bad = ant(proxy.base_url.removesuffix("/v1"), "nope")
    with pytest.raises(anthropic.AuthenticationError):
        await bad.messages.create(
            model="m", max_tokens=8, messages=[{"role": "user", "content": "x"}]
        )


async def test_throttling_and_5xx_are_retried_behind_the_proxy(
    fake: FakeModelServer, proxy: InterceptionProxy
) -> None:
    session = proxy.open_session()
    fake.inject(Fault.status(429, retry_after=30), Fault.status(503), Fault.status(500))
    out = await oai(session.base_url, session.secret).chat.completions.create(
        model="m", messages=[{"role": "user", "content": "x"}]
    )
    assert out.choices[0].message.content == "echo: x"
    attempts = session.turns[0]["attempts"]
    assert [a["cause"] for a in attempts] == ["throttled", "server", "server", "ok"]
    assert [a["status"] for a in attempts] == [429, 503, 500, 200]
    assert attempts[0]["wait"] >= 30  # the longer retry-after is honoured
    assert isinstance(proxy.clock, FakeClock) and len(proxy.clock.sleeps) == 3


async def test_transport_streak_gives_up_with_502(fake: FakeModelServer) -> None:
    policy = RetryPolicy(max_transport=3)
    async with InterceptionProxy(fake.url, retry=policy, clock=FakeClock()) as proxy:
        session = proxy.open_session()
        fake.inject(Fault.reset(), times=5)
        with pytest.raises(openai.InternalServerError) as err:
            await oai(session.base_url, session.secret).chat.completions.create(
                model="m", messages=[{"role": "user", "content": "x"}]
            )
        assert err.value.status_code == 502
        turn = session.turns[0]
        assert [a["cause"] for a in turn["attempts"]] == ["transport"] * 3
        assert turn["status"] is None and "upstream" in turn["error"]


async def test_malformed_responses_are_retried_then_pass(
    fake: FakeModelServer, proxy: InterceptionProxy
) -> None:
    session = proxy.open_session()
    fake.inject(Fault.malformed_json(), Fault.malformed_json())
    out = await oai(session.base_url, session.secret).chat.completions.create(
        model="m", messages=[{"role": "user", "content": "x"}]
    )
    assert out.choices[0].message.content == "echo: x"
    causes = [a["cause"] for a in session.turns[0]["attempts"]]
    assert causes == ["malformed", "malformed", "ok"]


async def test_refusal_and_413_pass_through_without_resending(
    fake: FakeModelServer, proxy: InterceptionProxy
) -> None:
    session = proxy.open_session()
    client = oai(session.base_url, session.secret)
    fake.inject(Fault.status(413))
    before = len(fake.requests)
    with pytest.raises(openai.APIStatusError) as err:
        await client.chat.completions.create(model="m", messages=[{"role": "user", "content": "x"}])
    assert err.value.status_code == 413
    assert len(fake.requests) - before == 1  # an identical oversized payload is never resent
    fake.inject(Fault.status(400))
    with pytest.raises(openai.BadRequestError):
        await client.chat.completions.create(model="m", messages=[{"role": "user", "content": "x"}])
    assert [t["status"] for t in session.turns] == [413, 400]


async def test_idempotent_retry_commits_one_turn(
    fake: FakeModelServer, proxy: InterceptionProxy
) -> None:
    session = proxy.open_session()
    body = json.dumps({"model": "m", "messages": [{"role": "user", "content": "once"}]}).encode()
    headers = [
        ("authorization", f"Bearer {session.secret}"),
        ("content-type", "application/json"),
        ("idempotency-key", "k-1"),
    ]
    before = len(fake.requests)
    async with HttpClient() as http:

        async def send() -> bytes:
            async with await http.request(
                "POST", session.base_url + "/chat/completions", headers=headers, body=body
            ) as resp:
                assert resp.status == 200
                return await resp.read()

        first, second, third = await asyncio.gather(send(), send(), send())
        again = await send()
    assert first == second == third == again
    assert len(session.turns) == 1
    assert len(fake.requests) - before == 1


async def test_token_ids_and_logprobs_are_recorded(proxy: InterceptionProxy) -> None:
    session = proxy.open_session()
    client = oai(session.base_url, session.secret)
    await client.chat.completions.create(
        model="m",
        messages=[{"role": "user", "content": "tokens"}],
        logprobs=True,
        extra_body={"return_token_ids": True, "return_tokens_as_token_ids": True},
    )
    tokens = session.turns[0]["tokens"]
    assert tokens["completion_token_ids"] and tokens["prompt_token_ids"]
    assert len(tokens["logprobs"]) == len(tokens["completion_tokens"]) > 0
    assert tokens["completion_tokens"][0].startswith("token_id:")


async def test_models_route(proxy: InterceptionProxy) -> None:
    session = proxy.open_session()
    page = await oai(session.base_url, session.secret).models.list()
    assert [m.id for m in page.data] == ["fake-model"]


async def test_many_rollouts_at_once_are_kept_apart(proxy: InterceptionProxy) -> None:
    sessions = [proxy.open_session(f"r{i}", limits=ModelLimits(max_turns=3)) for i in range(40)]

    async def harness(i: int) -> None:
        client = oai(sessions[i].base_url, sessions[i].secret)
        for turn in range(3):
            await client.chat.completions.create(
                model="m", messages=[{"role": "user", "content": f"{i}-{turn}"}]
            )

    await asyncio.gather(*(harness(i) for i in range(40)))
    for i, session in enumerate(sessions):
        contents = [t["request"]["messages"][0]["content"] for t in session.turns]
        assert contents == [f"{i}-{t}" for t in range(3)]


async def test_secrets_stay_out_of_traces_and_logs(
    proxy: InterceptionProxy, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.DEBUG)
    trace = Trace("x")
    session = proxy.open_session(trace=trace)
    client = oai(session.base_url, session.secret)
    await client.chat.completions.create(model="m", messages=[{"role": "user", "content": "a"}])
    dumped = json.dumps(trace.to_dict(), default=str)
    assert REAL_KEY not in dumped and session.secret not in dumped
    assert REAL_KEY not in caplog.text and session.secret not in caplog.text
    assert REAL_KEY not in repr(proxy.upstreams)


async def test_bad_requests_get_clear_errors(proxy: InterceptionProxy) -> None:
    session = proxy.open_session()
    auth = [("authorization", f"Bearer {session.secret}")]
    async with HttpClient() as http:
        resp = await http.request(
            "POST", session.base_url + "/chat/completions", headers=auth, body=b"{nope"
        )
        assert resp.status == 400 and b"not JSON" in await resp.read()
        resp = await http.request("GET", session.base_url + "/chat/completions", headers=auth)
        assert resp.status == 405
        await resp.read()
        resp = await http.request("POST", session.base_url + "/embeddings", headers=auth)
        assert resp.status == 404
        await resp.read()
    assert session.turns == []


async def test_ending_the_rollout_stops_a_turn_waiting_to_retry(fake: FakeModelServer) -> None:
    async with InterceptionProxy(fake.url) as proxy:  # the real clock: a 60 s retry-after
        session = proxy.open_session()
        fake.inject(Fault.status(429, retry_after=60))
        call = asyncio.ensure_future(
            oai(session.base_url, session.secret).chat.completions.create(
                model="m", messages=[{"role": "user", "content": "x"}]
            )
        )
        for _ in range(500):  # until the turn sleeps before its retry
            if session.waits:
                break
            await asyncio.sleep(0.01)
        session.close()
        with pytest.raises(openai.ConflictError):
            await asyncio.wait_for(call, 5)
        assert len(fake.requests) == 1  # never retried after the end
        assert session.turns[0]["error"].startswith("the rollout ended")
        assert proxy.sessions == []  # forgotten, but for its secret


async def test_ended_sessions_are_forgotten_but_still_answer_409(proxy: InterceptionProxy) -> None:
    ended = [proxy.open_session() for _ in range(5)]
    kept = proxy.open_session()
    for s in ended:
        s.close()
    assert proxy.sessions == [kept]
    with pytest.raises(openai.ConflictError):
        await oai(ended[0].base_url, ended[0].secret).chat.completions.create(
            model="m", messages=[{"role": "user", "content": "x"}]
        )


async def test_streamed_token_ids_and_logprobs_are_recorded(proxy: InterceptionProxy) -> None:
    session = proxy.open_session()
    stream = await oai(session.base_url, session.secret).chat.completions.create(
        model="m",
        messages=[{"role": "user", "content": "hello world"}],
        stream=True,
        logprobs=True,
        extra_body={"return_token_ids": True},
    )
    async for _ in stream:
        pass
    tokens = session.turns[0]["tokens"]
    assert tokens["completion_tokens"] == ["echo", ":", " hello", " world"]
    assert len(tokens["logprobs"]) == len(tokens["completion_token_ids"]) == 4
    assert tokens["prompt_token_ids"]
