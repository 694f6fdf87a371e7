"""The proxy forwards a harness's unsigned Chat Completions to a SigV4-signed upstream,
signed with the driver's AWS credentials, which never reach the harness or the trace."""

from __future__ import annotations

import base64
import sys
from collections.abc import AsyncIterator, Callable
from pathlib import Path
from typing import Any

import openai
import orjson
import pytest

from _support.aws import isolated_aws
from _support.images import png_bytes
from proctor import Environment, rollout
from proctor.agents import CommandAgent, ToolAgent
from proctor.proxy import InterceptionProxy, Upstream
from proctor.records import Trace
from proctor.testing import FakeBedrockServer, FakeClock, Reply

MODEL = "openai.gpt-oss-120b-1:0"
CLAUDE = "anthropic.claude-sonnet-4-5-20250929-v1:0"
SHELL = {
    "type": "function",
    "function": {
        "name": "shell",
        "description": "Run a command.",
        "parameters": {"type": "object", "properties": {"command": {"type": "string"}}},
    },
}
Use = Callable[[FakeBedrockServer], None]


@pytest.fixture
def aws_env(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> Use:
    return isolated_aws(monkeypatch, tmp_path)


@pytest.fixture
async def fake() -> AsyncIterator[FakeBedrockServer]:
    async with FakeBedrockServer(models=(MODEL,)) as server:
        yield server


def _secrets(fake: FakeBedrockServer) -> list[str]:
    env = fake.environ()
    return [env["AWS_ACCESS_KEY_ID"], env["AWS_SECRET_ACCESS_KEY"], "AWS4-HMAC-SHA256", "x-amz-"]


async def test_signed_upstream_never_shows_the_harness_its_credentials(
    fake: FakeBedrockServer, aws_env: Use
) -> None:
    aws_env(fake)
    trace = Trace("t1")
    async with InterceptionProxy(Upstream.of(fake.mantle_string()), clock=FakeClock()) as proxy:
        session = proxy.open_session("r1", trace=trace)
        harness = openai.AsyncOpenAI(
            base_url=session.base_url, api_key=session.secret, max_retries=0
        )
        try:
            raw = await harness.chat.completions.with_raw_response.create(
                model="anything", messages=[{"role": "user", "content": "hi signed"}]
            )
            models = await harness.models.list()
        finally:
            await harness.close()
    assert raw.parse().choices[0].message.content == "echo: hi signed"
    assert [m.id for m in models.data] == [MODEL]
    # The upstream saw a valid signature, on the model the proxy pins.
    assert not fake.refused
    chat = [r for r in fake.requests if r.api == "chat"]
    assert chat[0].model == MODEL
    assert (chat[0].headers.get("authorization") or "").startswith("AWS4-HMAC-SHA256 ")
    # The harness held the session secret only, and got no AWS header back.
    seen = [*session.env.values(), *(f"{k}: {v}" for k, v in raw.headers.items())]
    recorded = orjson.dumps([session.turns, trace.to_dict()]).decode()
    for secret in _secrets(fake):
        assert all(secret.lower() not in text.lower() for text in seen), secret
        assert secret.lower() not in recorded.lower(), secret
    assert session.turns[0]["status"] == 200


async def test_refused_signature_is_a_502_that_quotes_nothing(
    fake: FakeBedrockServer, aws_env: Use, monkeypatch: pytest.MonkeyPatch
) -> None:
    aws_env(fake)
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "wrong-secret")
    async with InterceptionProxy(Upstream.of(fake.mantle_string()), clock=FakeClock()) as proxy:
        session = proxy.open_session("r1")
        harness = openai.AsyncOpenAI(
            base_url=session.base_url, api_key=session.secret, max_retries=0
        )
        try:
            with pytest.raises(openai.APIStatusError) as caught:
                await harness.chat.completions.create(
                    model="m", messages=[{"role": "user", "content": "hi"}]
                )
        finally:
            await harness.close()
    assert caught.value.status_code == 502
    assert "refused the proxy's credentials" in str(caught.value)
    assert [e.kind for e in fake.refused] == ["InvalidSignatureException"]
    assert "wrong-secret" not in orjson.dumps(session.turns).decode()


def test_the_signer_stays_out_of_repr(fake: FakeBedrockServer, aws_env: Use) -> None:
    aws_env(fake)
    upstream = Upstream.of(fake.mantle_string())
    assert upstream.signer is not None
    assert fake.environ()["AWS_SECRET_ACCESS_KEY"] not in repr(upstream)


async def test_chat_harness_to_a_converse_model(aws_env: Use) -> None:
    """A harness speaking Chat Completions (tools, a forced call, an image, a tool
    result) to a Bedrock Converse model: translated both ways, signed, recorded, priced."""
    script = [Reply.tool("shell", command="ls"), Reply("done", input_tokens=900, cached_tokens=600)]
    async with FakeBedrockServer(script, models=(CLAUDE,)) as fake:
        aws_env(fake)
        trace = Trace("t1")
        async with InterceptionProxy(Upstream.of(fake.model_string()), clock=FakeClock()) as proxy:
            session = proxy.open_session("r1", trace=trace)
            harness = openai.AsyncOpenAI(
                base_url=session.base_url, api_key=session.secret, max_retries=0
            )
            image = "data:image/png;base64," + base64.b64encode(png_bytes(120, 2)).decode()
            messages: list[dict[str, Any]] = [
                {"role": "system", "content": "You act."},
                {
                    "role": "user",
                    "content": [
                        {"type": "text", "text": "list files"},
                        {"type": "image_url", "image_url": {"url": image}},
                    ],
                },
            ]
            try:
                create: Any = harness.chat.completions.create  # plain dicts, as a harness sends
                first = await create(
                    model="whatever",
                    messages=messages,
                    tools=[SHELL],
                    tool_choice={"type": "function", "function": {"name": "shell"}},
                )
                call = first.choices[0].message.tool_calls[0]
                messages += [
                    first.choices[0].message.model_dump(exclude_none=True),
                    {"role": "tool", "tool_call_id": call.id, "content": "a.txt"},
                ]
                stream = await create(
                    model="whatever",
                    messages=messages,
                    tools=[SHELL],
                    stream=True,
                    stream_options={"include_usage": True},
                )
                chunks = [chunk async for chunk in stream]
                listed = await harness.models.list()
                with pytest.raises(openai.NotFoundError, match="Bedrock Converse"):
                    await harness.responses.create(model="m", input="hi")
            finally:
                await harness.close()
    assert first.choices[0].finish_reason == "tool_calls"
    assert call.function.name == "shell" and orjson.loads(call.function.arguments) == {
        "command": "ls"
    }
    text = "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
    assert text == "done"
    assert chunks[-1].usage is not None and chunks[-1].usage.prompt_tokens == 900
    assert [m.id for m in listed.data] == [CLAUDE]
    assert [r.path.rsplit("/", 1)[-1] for r in fake.requests] == ["converse", "converse-stream"]
    converse = [r.json for r in fake.requests]
    assert converse[0]["toolConfig"]["toolChoice"] == {"tool": {"name": "shell"}}
    assert converse[0]["messages"][0]["content"][1]["image"]["format"] == "png"
    assert converse[1]["messages"][2]["content"][0]["toolResult"]["toolUseId"] == call.id
    assert not fake.refused
    turns = session.turns
    assert [t["status"] for t in turns] == [200, 200]
    assert turns[1]["usage"]["cached_input_tokens"] == 600
    assert turns[1]["cost"] is not None and turns[1]["cost"] > 0
    recorded = orjson.dumps([turns, trace.to_dict()]).decode().lower()
    for secret in _secrets(fake):
        assert secret.lower() not in recorded, secret


async def test_converse_errors_reach_the_harness_in_openai_shape(aws_env: Use) -> None:
    async with FakeBedrockServer(["unused"], models=(CLAUDE,)) as fake:
        aws_env(fake)
        upstream = Upstream.of(fake.model_string("anthropic.claude-unknown-v1:0"))
        async with InterceptionProxy(upstream, clock=FakeClock()) as proxy:
            session = proxy.open_session("r1")
            harness = openai.AsyncOpenAI(
                base_url=session.base_url, api_key=session.secret, max_retries=0
            )
            try:
                with pytest.raises(openai.BadRequestError) as caught:
                    await harness.chat.completions.create(
                        model="m", messages=[{"role": "user", "content": "hi"}]
                    )
            finally:
                await harness.close()
    assert caught.value.code == "ValidationException"
    assert "model identifier is invalid" in caught.value.message


env = Environment("bedrock-proxied")


@env.template
async def say(word: str):
    answer = yield f"say {word}"
    yield 1.0 if word in str(answer) else 0.0


HARNESS = [sys.executable, str(Path(__file__).with_name("harness.py"))]


async def test_rollouts_on_a_bedrock_model_through_the_proxy(
    aws_env: Use, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A harness process (Chat Completions over plain HTTP) and a ToolAgent both run on
    a Bedrock Converse model through the proxy; neither sees an AWS credential."""
    async with FakeBedrockServer(models=(CLAUDE,)) as fake:
        aws_env(fake)
        model = fake.model_string()
        async with InterceptionProxy(Upstream.of(model)) as proxy:
            command = CommandAgent(HARNESS, env={"HARNESS_TURNS": "2"}, answer="json")
            harness_run = await rollout(say(word="apple"), command, proxy=proxy)
            tool_run = await rollout(say(word="pear"), ToolAgent(model), proxy=proxy)
    assert harness_run.error is None, harness_run.error
    assert harness_run.reward == 1.0 and harness_run.answer["leaked"] == []
    assert tool_run.error is None, tool_run.error
    assert tool_run.reward == 1.0
    assert len(fake.requests) == 3 and not fake.refused
    assert all(r.api == "converse" for r in fake.requests)
    for run in (harness_run, tool_run):
        assert run.cost is not None and run.cost > 0
        text = orjson.dumps(run.to_dict(), default=str).decode().lower()
        for secret in _secrets(fake):
            assert secret.lower() not in text, secret


async def test_a_streamed_tool_call_arrives_in_chunks(aws_env: Use) -> None:
    script = [
        Reply(reasoning="look first", tool_calls=Reply.tool("shell", command="ls").tool_calls)
    ]
    async with FakeBedrockServer(script, models=(CLAUDE,)) as fake:
        aws_env(fake)
        async with InterceptionProxy(Upstream.of(fake.model_string()), clock=FakeClock()) as proxy:
            session = proxy.open_session("r1")
            harness = openai.AsyncOpenAI(
                base_url=session.base_url, api_key=session.secret, max_retries=0
            )
            try:
                create: Any = harness.chat.completions.create
                stream = await create(
                    model="m",
                    messages=[{"role": "user", "content": "go"}],
                    tools=[SHELL],
                    stream=True,
                )
                chunks = [chunk async for chunk in stream]
            finally:
                await harness.close()
    deltas = [c.choices[0].delta for c in chunks if c.choices]
    calls = [call for d in deltas for call in d.tool_calls or ()]
    assert calls[0].id and calls[0].function.name == "shell"
    assert "".join(c.function.arguments or "" for c in calls) == '{"command":"ls"}'
    assert chunks[-1].choices[0].finish_reason == "tool_calls"
    (turn,) = session.turns
    assert turn["status"] == 200 and turn["error"] is None
    assert turn["response"]["choices"][0]["message"]["tool_calls"][0]["function"]["name"] == "shell"
    assert turn["response"]["choices"][0]["message"]["reasoning_content"] == "look first"
