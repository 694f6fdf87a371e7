"""Injected faults reach the official SDKs as the errors real providers cause."""

# The SDKs' typed unions (a response or a stream, a block of any kind) are what the
# fake is tested against: narrowing each one would only restate the assertions.
# mypy: disable-error-code="union-attr, arg-type, call-overload, index, list-item, misc"

from __future__ import annotations

import asyncio
import json
import signal
import sys
from typing import Any

import anthropic
import httpx2
import openai
import pytest

from proctor.testing import FakeModelServer, Fault, Reply

USER: Any = [{"role": "user", "content": "hello"}]
SHELL: Any = {"type": "function", "function": {"name": "shell", "parameters": {"type": "object"}}}


@pytest.fixture
def replies() -> list[Reply | str]:
    """Numbered replies, so a test can tell which one a retry got."""
    return [f"reply {i}" for i in range(10)]


async def chat(client: openai.AsyncOpenAI, stream: bool = False, **kwargs: Any) -> Any:
    """One chat call, with a stream read to its end."""
    out = await client.chat.completions.create(model="m", messages=USER, stream=stream, **kwargs)
    return [chunk async for chunk in out] if stream else out


async def message(client: anthropic.AsyncAnthropic, stream: bool = False) -> Any:
    """One Anthropic call, with a stream read to its end."""
    out = await client.messages.create(model="c", max_tokens=9, messages=USER, stream=stream)
    return [event async for event in out] if stream else out


async def test_429_with_retry_after(
    fake: FakeModelServer, oai: openai.AsyncOpenAI, ant: anthropic.AsyncAnthropic
) -> None:
    fake.inject(Fault.status(429, retry_after=2.5), times=2)
    with pytest.raises(openai.RateLimitError) as caught:
        await chat(oai)
    assert caught.value.response.headers["retry-after"] == "2.5"
    assert caught.value.body["type"] == "requests"
    assert caught.value.code == "rate_limit_exceeded"
    with pytest.raises(anthropic.RateLimitError) as info:
        await message(ant)
    assert info.value.response.headers["retry-after"] == "2.5"
    assert info.value.body["error"]["type"] == "rate_limit_error"


@pytest.mark.parametrize(
    ("status", "error"),
    [
        (500, openai.InternalServerError),
        (503, openai.InternalServerError),
        (408, openai.APIStatusError),
        (409, openai.ConflictError),
        (413, openai.APIStatusError),
    ],
)
@pytest.mark.parametrize("stream", [False, True])
async def test_openai_statuses(
    fake: FakeModelServer,
    oai: openai.AsyncOpenAI,
    status: int,
    error: type[openai.APIStatusError],
    stream: bool,
) -> None:
    fake.inject(Fault.status(status, message="boom", headers={"x-extra": "1"}))
    with pytest.raises(error) as caught:
        await chat(oai, stream)
    assert caught.value.status_code == status
    assert caught.value.message.endswith("boom")
    assert caught.value.response.headers["x-extra"] == "1"


@pytest.mark.parametrize(
    ("status", "error", "kind"),
    [
        (529, anthropic.OverloadedError, "overloaded_error"),
        (500, anthropic.InternalServerError, "api_error"),
        (413, anthropic.APIStatusError, "request_too_large"),
    ],
)
async def test_anthropic_statuses(
    fake: FakeModelServer,
    ant: anthropic.AsyncAnthropic,
    status: int,
    error: type[anthropic.APIStatusError],
    kind: str,
) -> None:
    fake.inject(Fault.status(status))
    with pytest.raises(error) as caught:
        await message(ant)
    assert caught.value.status_code == status
    assert caught.value.body["type"] == "error"
    assert caught.value.body["error"]["type"] == kind


@pytest.mark.parametrize("stream", [False, True])
async def test_reset_mid_body(
    fake: FakeModelServer, oai: openai.AsyncOpenAI, ant: anthropic.AsyncAnthropic, stream: bool
) -> None:
    fake.inject(Fault.reset(), times=2)
    with pytest.raises(openai.APIConnectionError) as caught:
        await chat(oai, stream)
    # The head arrived, the body did not.
    assert "without sending complete message body" in str(caught.value.__cause__)
    # Anthropic's stream iterator lets the transport error through unwrapped.
    with pytest.raises((anthropic.APIConnectionError, httpx2.TransportError)):
        await message(ant, stream)


async def test_reset_before_the_response(fake: FakeModelServer, oai: openai.AsyncOpenAI) -> None:
    fake.inject(Fault.reset(mid_body=False))
    with pytest.raises(openai.APIConnectionError):
        await chat(oai)


@pytest.mark.parametrize("stream", [False, True])
async def test_malformed_json(
    fake: FakeModelServer, oai: openai.AsyncOpenAI, ant: anthropic.AsyncAnthropic, stream: bool
) -> None:
    fake.inject(Fault.malformed_json(), times=2)
    with pytest.raises(json.JSONDecodeError):
        await chat(oai, stream)
    with pytest.raises(json.JSONDecodeError):
        await message(ant, stream)


@pytest.mark.parametrize("stream", [False, True])
async def test_missing_tool_calls(
    fake: FakeModelServer, oai: openai.AsyncOpenAI, stream: bool
) -> None:
    fake.inject(Fault.missing_tool_calls())
    out = await chat(oai, stream, tools=[SHELL])
    if stream:
        assert out[-1].choices[0].finish_reason == "tool_calls"
        assert not any(c.choices[0].delta.tool_calls for c in out)
    else:
        assert out.choices[0].finish_reason == "tool_calls"
        assert out.choices[0].message.tool_calls is None


async def test_broken_tool_call_arguments(
    fake: FakeModelServer, oai: openai.AsyncOpenAI, ant: anthropic.AsyncAnthropic
) -> None:
    fake.inject(Fault.missing_tool_calls(broken_arguments=True), times=3)
    (tool_call,) = (await chat(oai, tools=[SHELL])).choices[0].message.tool_calls
    assert tool_call.function.name == "shell"
    with pytest.raises(json.JSONDecodeError):
        json.loads(tool_call.function.arguments)
    (item,) = (await oai.responses.create(model="m", input="x")).output
    assert item.type == "function_call" and item.name == "tool"
    with pytest.raises(json.JSONDecodeError):
        json.loads(item.arguments)
    (block,) = (await message(ant)).content
    assert block.type == "tool_use" and not isinstance(block.input, dict)


async def test_missing_tool_calls_in_anthropic_and_responses(
    fake: FakeModelServer, oai: openai.AsyncOpenAI, ant: anthropic.AsyncAnthropic
) -> None:
    fake.inject(Fault.missing_tool_calls(), times=2)
    out = await message(ant)
    assert (out.stop_reason, out.content) == ("tool_use", [])
    assert (await oai.responses.create(model="m", input="x")).output == []


async def test_slow_then_the_reply(fake: FakeModelServer, oai: openai.AsyncOpenAI) -> None:
    fake.inject(Fault.slow(5.0), Fault.slow(0.05))
    with pytest.raises(openai.APITimeoutError):
        await chat(oai, timeout=0.1)
    out = await chat(oai, timeout=2.0)
    assert out.choices[0].message.content == "reply 0"  # each slow fault waits, then answers


async def test_faults_play_in_order_and_spare_the_script(
    fake: FakeModelServer, oai: openai.AsyncOpenAI
) -> None:
    fake.inject(Fault.status(429), Fault.status(503))
    fake.inject(Fault.reset(), times=2)
    assert [f.kind for f in fake.pending_faults] == ["status", "status", "reset", "reset"]
    errors = [openai.RateLimitError, openai.InternalServerError] + [openai.APIConnectionError] * 2
    for error in errors:
        with pytest.raises(error):
            await chat(oai)
    assert (await chat(oai)).choices[0].message.content == "reply 0"
    assert [r.fault.kind if r.fault else None for r in fake.requests] == [
        "status", "status", "reset", "reset", None,
    ]  # fmt: skip
    assert fake.pending_faults == ()


async def test_models_listing_is_never_faulted(
    fake: FakeModelServer, oai: openai.AsyncOpenAI
) -> None:
    fake.inject(Fault.status(500))
    assert [m.id async for m in oai.models.list()] == ["fake-model"]
    assert len(fake.pending_faults) == 1


def test_fault_arguments_are_checked() -> None:
    with pytest.raises(ValueError, match="4xx or 5xx"):
        Fault.status(200)
    with pytest.raises(ValueError, match="chunks"):
        Reply(text="x", chunks=0)


async def test_runs_as_a_process() -> None:
    proc = await asyncio.create_subprocess_exec(
        sys.executable, "-m", "proctor.testing.fake_model", "--port", "0",
        stdout=asyncio.subprocess.PIPE,
    )  # fmt: skip
    try:
        assert proc.stdout is not None
        async with asyncio.timeout(30):
            info = json.loads(await proc.stdout.readline())
        async with openai.AsyncOpenAI(base_url=info["url"], api_key="x", max_retries=0) as client:
            out = await chat(client)
        assert out.choices[0].message.content == "echo: hello"
        assert info["origin"] + "/v1" == info["url"]
    finally:
        proc.send_signal(signal.SIGTERM)
        assert await proc.wait() == 0
