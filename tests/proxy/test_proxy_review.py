"""Regressions found in review: idempotency under failure, stream framing, routing,
credentials, token ids."""

from __future__ import annotations

import asyncio
import json
import sys

import openai
import pytest

from proctor._http import HttpClient
from proctor.agents import CommandAgent
from proctor.models import RetryPolicy
from proctor.proxy import InterceptionProxy, ModelLimits, ProxySession, Upstream
from proctor.testing import FakeClock, FakeModelServer, Fault, Reply

REAL_KEY = "sk-real-upstream-key-never-leaks"


def body(content: str = "x", **extra: object) -> bytes:
    return json.dumps(
        {"model": "m", "messages": [{"role": "user", "content": content}], **extra}
    ).encode()


async def post(
    http: HttpClient, session: ProxySession, data: bytes, key: str | None = None
) -> tuple[int, bytes]:
    headers = [("authorization", f"Bearer {session.secret}")]
    if key is not None:
        headers.append(("idempotency-key", key))
    async with await http.request(
        "POST", session.base_url + "/chat/completions", headers=headers, body=data
    ) as resp:
        return resp.status, await resp.read()


async def test_a_cut_stream_is_not_replayed_and_its_retry_is_the_same_turn() -> None:
    async with (
        FakeModelServer(Reply(text="hello " * 30, chunks=30, chunk_delay=0.01)) as fake,
        InterceptionProxy(fake.url) as proxy,
        HttpClient() as http,
    ):
        session = proxy.open_session()
        headers = [("authorization", f"Bearer {session.secret}"), ("idempotency-key", "k")]
        url = session.base_url + "/chat/completions"
        resp = await http.request("POST", url, headers=headers, body=body(stream=True))
        async for _ in resp.aiter_bytes():
            break  # the harness hangs up after the first bytes
        await resp.aclose()
        for _ in range(300):
            if session.turns:
                break
            await asyncio.sleep(0.01)
        assert session.turns[0]["error"] == "client disconnected"
        status, data = await post(http, session, body(stream=True), "k")
        assert status == 200 and b"[DONE]" in data  # a whole answer, not the cut one
        assert len(session.turns) == 1 and session.admitted == 1
        assert session.turns[0]["error"] is None
        assert len(session.turns[0]["attempts"]) == 2


async def test_a_failed_keyed_turn_retried_counts_once(fake: FakeModelServer) -> None:
    policy = RetryPolicy(max_transport=2)
    async with (
        InterceptionProxy(fake.url, retry=policy, clock=FakeClock()) as proxy,
        HttpClient() as http,
    ):
        session = proxy.open_session(limits=ModelLimits(max_turns=2))
        fake.inject(Fault.reset(), times=2)
        status, _ = await post(http, session, body(), "k")
        assert status == 502
        status, _ = await post(http, session, body(), "k")
        assert status == 200
        assert session.admitted == 1 and len(session.turns) == 1
        causes = [a["cause"] for a in session.turns[0]["attempts"]]
        assert causes == ["transport", "transport", "ok"]
        assert session.turns[0]["idempotency_key"] == "k"
        status, _ = await post(http, session, body("next"))
        assert status == 200  # the budget still has its second turn


async def test_a_key_reused_for_another_body_is_refused(fake: FakeModelServer) -> None:
    async with InterceptionProxy(fake.url) as proxy, HttpClient() as http:
        session = proxy.open_session()
        assert (await post(http, session, body("a"), "k"))[0] == 200
        status, data = await post(http, session, body("b"), "k")
        assert status == 422 and b"idempotency_key_reused" in data
        assert len(session.turns) == 1


async def test_a_retry_waiting_on_its_key_is_not_forwarded_after_the_end() -> None:
    gate = asyncio.Event()

    async def slow(_request: object) -> Reply:
        await gate.wait()
        return Reply(text="late")

    async with (
        FakeModelServer(slow) as fake,
        InterceptionProxy(fake.url) as proxy,
        HttpClient() as http,
    ):
        session = proxy.open_session()
        first = asyncio.ensure_future(post(http, session, body(), "k"))
        for _ in range(300):
            if fake.requests:
                break
            await asyncio.sleep(0.01)
        second = asyncio.ensure_future(post(http, session, body(), "k"))
        await asyncio.sleep(0.05)
        session.close()
        status, _ = await asyncio.wait_for(second, 5)
        assert status == 409
        gate.set()
        await asyncio.wait_for(first, 5)
        assert len(fake.requests) == 1


async def test_stream_attempts_have_real_timing(fake: FakeModelServer) -> None:
    async with InterceptionProxy(fake.url) as proxy, HttpClient() as http:
        session = proxy.open_session()
        await post(http, session, body(stream=True))
        attempt = session.turns[0]["attempts"][0]
        assert attempt["cause"] == "ok" and attempt["started"] > 0
        assert 0 <= attempt["duration"] < 10


async def test_usage_chunk_is_withheld_unless_the_harness_asked(fake: FakeModelServer) -> None:
    async with InterceptionProxy(fake.url) as proxy, HttpClient() as http:
        session = proxy.open_session()
        _, plain = await post(http, session, body(stream=True))
        _, asked = await post(
            http, session, body(stream=True, stream_options={"include_usage": True})
        )
    assert b'"choices":[]' not in plain and b"[DONE]" in plain
    assert b'"choices":[]' in asked
    assert all(t["usage"]["output_tokens"] > 0 for t in session.turns)  # both metered
    client = openai.AsyncOpenAI(base_url=session.base_url, api_key="unused", max_retries=0)
    await client.close()


def test_model_strings_route_by_their_api_and_build_sdk_urls() -> None:
    anthropic = Upstream.of("anthropic/claude-haiku-4-5@http://127.0.0.1:9/v1")
    assert anthropic.kind == "anthropic" and anthropic.model == "claude-haiku-4-5"
    assert anthropic.url("/v1/messages") == "http://127.0.0.1:9/v1/messages"
    proxy = InterceptionProxy("anthropic/claude-haiku-4-5@http://127.0.0.1:9")
    assert set(proxy.upstreams) == {"anthropic"}
    gemini = Upstream.of("gemini/gemini-2.5-pro")
    assert (
        gemini.url("/v1/chat/completions")
        == "https://generativelanguage.googleapis.com/v1beta/openai/chat/completions"
    )
    with pytest.raises(ValueError, match="two openai upstreams"):
        InterceptionProxy("http://127.0.0.1:1/v1", "openai/gpt-4.1-mini")


async def test_anthropic_model_string_serves_messages(fake: FakeModelServer) -> None:
    async with (
        InterceptionProxy(f"anthropic/claude-haiku-4-5@{fake.origin}") as proxy,
        HttpClient() as http,
    ):
        session = proxy.open_session()
        data = json.dumps(
            {"model": "x", "max_tokens": 8, "messages": [{"role": "user", "content": "hi"}]}
        ).encode()
        async with await http.request(
            "POST",
            proxy.base_url + "/messages",
            headers=[("x-api-key", session.secret)],
            body=data,
        ) as resp:
            assert resp.status == 200, await resp.read()
        assert fake.requests[-1].model == "claude-haiku-4-5"
        assert fake.requests[-1].headers.get("anthropic-version")


async def test_upstream_refusing_the_proxy_key_never_shows_its_body(
    fake: FakeModelServer,
) -> None:
    leaky = f"Incorrect API key provided: {REAL_KEY[:8]}****"
    async with (
        InterceptionProxy(Upstream(fake.url, api_key=REAL_KEY)) as proxy,
        HttpClient() as http,
    ):
        session = proxy.open_session()
        fake.inject(Fault.status(401, message=leaky))
        status, data = await post(http, session, body())
        assert status == 502 and b"credentials" in data
        assert REAL_KEY[:8].encode() not in data
        assert REAL_KEY[:8] not in json.dumps(session.turns, default=str)


async def test_vllm_token_id_strings_become_ids(fake: FakeModelServer) -> None:
    async with InterceptionProxy(fake.url) as proxy, HttpClient() as http:
        session = proxy.open_session()
        await post(http, session, body(logprobs=True, return_tokens_as_token_ids=True))
        tokens = session.turns[0]["tokens"]
        assert tokens["completion_tokens"][0].startswith("token_id:")
        assert tokens["completion_token_ids"] == [
            int(t.split(":")[1]) for t in tokens["completion_tokens"]
        ]


def test_command_agent_environment_is_an_allowlist(monkeypatch: pytest.MonkeyPatch) -> None:
    from proctor import Environment, Task
    from proctor.agents import Run

    names = ["API_KEY", "OPENAI_KEY", "AZURE_OPENAI_KEY", "OPENROUTER_KEY", "OPENAI_APIKEY"]
    names += ["CREDENTIALS", "GH_TOKEN", "DB_PASSWORD", "AWS_SECRET_ACCESS_KEY", "MYSQL_PWD"]
    names += ["DATABASE_URL", "SENTRY_DSN", "GH_PAT", "PROCTOR_TOKEN", "HARMLESS_SETTING"]
    for name in names:
        monkeypatch.setenv(name, "secret-value")
    monkeypatch.setenv("ANTHROPIC_API_KEY", "sk-ant-real")
    monkeypatch.setenv("LC_TIME", "C")
    Environment("cmd-env")
    run = Run(Task(env="cmd-env", id="t"))
    env = CommandAgent([sys.executable]).environ(run)
    assert not [n for n in names if n in env] and "ANTHROPIC_API_KEY" not in env
    assert "PATH" in env and env["LC_TIME"] == "C" and env["HOME"] == "/home/harness"
    env = CommandAgent([sys.executable], pass_env=["HARMLESS_SETTING"]).environ(run)
    assert env["HARMLESS_SETTING"] == "secret-value"


async def test_broken_answers_are_malformed_streamed_or_not(fake: FakeModelServer) -> None:
    async with (
        InterceptionProxy(fake.url, clock=FakeClock()) as proxy,
        HttpClient() as http,
    ):
        session = proxy.open_session()
        fake.inject(Fault.missing_tool_calls())
        status, _ = await post(http, session, body())
        assert status == 200  # retried behind the proxy
        assert [a["cause"] for a in session.turns[0]["attempts"]] == ["malformed", "ok"]
        fake.inject(Fault.malformed_json())
        await post(http, session, body(stream=True))  # already streaming: cannot retry
        turn = session.turns[1]
        assert [a["cause"] for a in turn["attempts"]] == ["malformed"]
        assert turn["error"]
