"""The adapters, through the official SDKs, against a real local server with faults."""

from __future__ import annotations

import base64
import socket
from collections.abc import AsyncIterator
from typing import Any

import orjson
import pytest

from _support.images import png_bytes
from proctor._errors import ModelError, ModelRequestError, PayloadTooLarge, RetriesExhausted
from proctor.models import (
    CHECKPOINT,
    ContextPolicy,
    ModelClient,
    ProviderAdapter,
    RetryPolicy,
    ToolSpec,
    cost,
    model_client,
)
from proctor.testing import FakeClock, FakeModelServer, FakeToolCall, Fault, Reply

APIS = ["chat", "responses", "messages"]
SHELL = ToolSpec(
    "shell",
    "Run a command.",
    {"type": "object", "properties": {"cmd": {"type": "string"}}, "required": ["cmd"]},
)
TASK: list[dict[str, Any]] = [
    {"role": "system", "content": "Be brief."},
    {"role": "user", "content": "List files."},
]
EXACT = RetryPolicy(jitter=0.0)

Replies = list[Reply | str]


@pytest.fixture
def clock() -> FakeClock:
    return FakeClock()


def spec_for(api: str, fake: FakeModelServer, model: str = "fake-model") -> str:
    if api == "chat":
        return f"vllm/{model}@{fake.url}"
    if api == "responses":
        return f"openai-responses/{model}@{fake.url}"
    return f"anthropic/{model}@{fake.origin}"


@pytest.fixture(params=APIS)
def api(request: pytest.FixtureRequest) -> str:
    return str(request.param)


@pytest.fixture
async def client(
    api: str, fake: FakeModelServer, clock: FakeClock
) -> AsyncIterator[ProviderAdapter]:
    async with model_client(spec_for(api, fake), retry=EXACT, clock=clock) as adapter:
        yield adapter


# -- answers --------------------------------------------------------------------------


async def test_text_answer_with_usage(
    api: str, replies: Replies, fake: FakeModelServer, client: ProviderAdapter
) -> None:
    replies.append(Reply(text="a.txt b.txt", input_tokens=120, cached_tokens=100, output_tokens=7))
    response = await client.complete(TASK)
    assert isinstance(client, ModelClient)
    assert response.content == "a.txt b.txt" and response.tool_calls == []
    assert response.message == {"role": "assistant", "content": "a.txt b.txt"}
    assert response.finish_reason == "stop" and response.model == client.model
    assert response.usage.input_tokens == 120 and response.usage.cached_input_tokens == 100
    assert response.usage.output_tokens == 7
    assert response.cost is None  # no price for a local model
    assert [(a.n, a.cause, a.status) for a in response.attempts] == [(1, "ok", 200)]
    assert response.raw["model"] == "fake-model"
    assert orjson.dumps(response.to_dict())
    assert len(fake.requests) == 1 and fake.requests[0].messages[0]["content"] == "Be brief."


async def test_tool_call_round_trip(
    api: str, replies: Replies, fake: FakeModelServer, client: ProviderAdapter
) -> None:
    replies += [Reply(text="Looking.", tool_calls=(FakeToolCall("shell", {"cmd": "ls"}),)), "Done."]
    first = await client.complete(TASK, tools=[SHELL], require_tool_call=True)
    (call,) = first.tool_calls
    assert (call.name, call.arguments) == ("shell", {"cmd": "ls"})
    assert first.finish_reason == "tool_calls" and first.content == "Looking."
    history = [*TASK, first.message, {"role": "tool", "tool_call_id": call.id, "content": "a.txt"}]
    second = await client.complete(history, tools=[SHELL])
    assert second.content == "Done."
    seen = fake.requests[-1]
    assert seen.tool_names == ["shell"]
    assert [m["role"] for m in seen.messages] == ["system", "user", "assistant", "tool"]
    assert seen.messages[-1]["content"] == "a.txt"
    assert seen.messages[-1]["tool_call_id"] == call.id


async def test_tools_are_sent_in_each_apis_shape(
    api: str, fake: FakeModelServer, client: ProviderAdapter
) -> None:
    await client.complete(TASK, tools=[SHELL])
    (tool,) = fake.requests[0].json["tools"]
    if api == "chat":
        assert tool == {
            "type": "function",
            "function": {
                "name": "shell",
                "description": "Run a command.",
                "parameters": SHELL.parameters,
            },
        }
    elif api == "responses":
        assert tool == {
            "type": "function",
            "name": "shell",
            "description": "Run a command.",
            "parameters": SHELL.parameters,
            "strict": False,
        }
    else:
        assert tool["input_schema"] == SHELL.parameters and tool["name"] == "shell"


async def test_params_pass_through_and_max_tokens_maps(
    api: str, fake: FakeModelServer, clock: FakeClock
) -> None:
    spec = spec_for(api, fake)
    async with model_client(spec, clock=clock, params={"temperature": 0.5, "max_tokens": 64}) as m:
        await m.complete(TASK, temperature=0.0, top_p=0.9)
        with pytest.raises(ValueError, match="stream"):
            await m.complete(TASK, stream=True)
    body = fake.requests[0].json
    assert body["temperature"] == 0.0 and body["top_p"] == 0.9
    key = {"chat": "max_tokens", "responses": "max_output_tokens", "messages": "max_tokens"}[api]
    assert body[key] == 64


async def test_anthropic_gets_a_default_max_tokens(fake: FakeModelServer) -> None:
    async with model_client(spec_for("messages", fake)) as m:
        await m.complete(TASK)
    assert fake.requests[0].json["max_tokens"] == 8192


# -- session keys and cache breakpoints -----------------------------------------------


async def test_session_key_goes_where_each_provider_takes_it(
    api: str, fake: FakeModelServer, client: ProviderAdapter
) -> None:
    await client.complete(TASK, session_key="rollout-7")
    seen = fake.requests[0]
    if api == "messages":
        assert seen.json["metadata"] == {"user_id": "rollout-7"}
    elif api == "responses":  # OpenAI itself: prompt_cache_key
        assert seen.json["prompt_cache_key"] == "rollout-7"
        assert "x-session-id" not in seen.headers
    else:  # an OpenAI-compatible server: a header
        assert seen.headers.get("x-session-id") == "rollout-7"
        assert "prompt_cache_key" not in seen.json


async def test_the_callers_own_session_parameters_win(
    api: str, fake: FakeModelServer, client: ProviderAdapter
) -> None:
    mine = {"metadata": {"user_id": "mine"}} if api == "messages" else {"prompt_cache_key": "mine"}
    await client.complete(TASK, session_key="rollout-7", **mine)
    assert {k: fake.requests[0].json[k] for k in mine} == mine


async def test_openai_chat_sends_prompt_cache_key_and_prices_the_answer(
    fake: FakeModelServer,
) -> None:
    async with model_client(f"openai/gpt-4.1-mini@{fake.url}") as m:
        response = await m.complete(TASK, session_key="s")
    assert fake.requests[0].json["prompt_cache_key"] == "s"
    assert fake.requests[0].headers.get("authorization") == "Bearer EMPTY"
    assert response.cost == cost("gpt-4.1-mini", response.usage) and response.cost
    assert response.cost > 0


async def test_anthropic_breakpoints_mark_the_stable_prefix(fake: FakeModelServer) -> None:
    history: list[dict[str, Any]] = [
        *TASK,
        {
            "role": "assistant",
            "content": "ok",
            "tool_calls": [
                {
                    "id": "t1",
                    "type": "function",
                    "function": {"name": "shell", "arguments": '{"cmd":"ls"}'},
                }
            ],
        },
        {"role": "tool", "tool_call_id": "t1", "content": "a.txt"},
        {"role": "user", "content": "And now?"},
    ]
    async with model_client(spec_for("messages", fake)) as m:
        await m.complete(history, tools=[SHELL])
    body = fake.requests[0].json
    marked = {"type": "ephemeral"}
    assert body["system"] == [{"type": "text", "text": "Be brief.", "cache_control": marked}]
    assert body["tools"][-1]["cache_control"] == marked
    user_turns = [t for t in body["messages"] if t["role"] == "user"]
    assert [t["content"][-1].get("cache_control") for t in user_turns] == [marked, marked]
    # the tool result and the next user text merge into one user turn (roles alternate)
    assert [b["type"] for b in user_turns[-1]["content"]] == ["tool_result", "text"]
    assert body["messages"][1]["content"][1] == {
        "type": "tool_use",
        "id": "t1",
        "name": "shell",
        "input": {"cmd": "ls"},
    }
    async with model_client(spec_for("messages", fake), cache_prompt=False) as m:
        await m.complete(history)
    assert b"cache_control" not in fake.requests[1].body


async def test_anthropic_thinking_blocks_go_back_verbatim(fake: FakeModelServer) -> None:
    thinking = {"type": "thinking", "thinking": "plan", "signature": "sig"}
    history: list[dict[str, Any]] = [
        *TASK,
        {
            "role": "assistant",
            "content": None,
            "thinking_blocks": [thinking],
            "tool_calls": [
                {"id": "t1", "type": "function", "function": {"name": "shell", "arguments": "{}"}}
            ],
        },
        {"role": "tool", "tool_call_id": "t1", "content": [{"type": "text", "text": "done"}]},
    ]
    async with model_client(spec_for("messages", fake)) as m:
        await m.complete(history)
    async with model_client(spec_for("chat", fake)) as m:
        await m.complete(history)
    anthropic_body, chat_body = fake.requests[0].json, fake.requests[1].json
    assert anthropic_body["messages"][1]["content"][0] == thinking
    assert anthropic_body["messages"][2]["content"][0]["content"][0]["text"] == "done"
    assert "thinking_blocks" not in chat_body["messages"][2]


async def test_images_convert_to_each_api(fake: FakeModelServer) -> None:
    png = base64.b64encode(png_bytes(30)).decode()
    parts = [
        {"type": "text", "text": "What is this?"},
        {"type": "image_url", "image_url": {"url": f"data:image/png;base64,{png}"}},
        {"type": "image_url", "image_url": {"url": "https://example.com/cat.png"}},
    ]
    messages = [{"role": "user", "content": parts}]
    async with model_client(spec_for("messages", fake)) as m:
        await m.complete(messages)
    async with model_client(spec_for("responses", fake)) as m:
        await m.complete(messages)
    blocks = fake.requests[0].json["messages"][0]["content"]
    assert blocks[1]["source"] == {"type": "base64", "media_type": "image/png", "data": png}
    assert blocks[2]["source"] == {"type": "url", "url": "https://example.com/cat.png"}
    items = fake.requests[1].json["input"][0]["content"]
    assert items[0] == {"type": "input_text", "text": "What is this?"}
    assert items[2] == {"type": "input_image", "image_url": "https://example.com/cat.png"}


# -- the retry contract under injected faults -----------------------------------------


async def test_each_fault_is_retried_with_its_cause_and_wait(
    api: str, replies: Replies, fake: FakeModelServer, client: ProviderAdapter, clock: FakeClock
) -> None:
    replies.append(Reply.tool("shell", cmd="ls"))
    fake.inject(
        Fault.status(429, retry_after=30),
        Fault.status(529 if api == "messages" else 503),
        Fault.status(500),
        Fault.status(408),
        Fault.status(409),
        Fault.reset(),
        Fault.reset(mid_body=False),
        Fault.malformed_json(),
        Fault.missing_tool_calls(),
        Fault.missing_tool_calls(broken_arguments=True),
    )
    response = await client.complete(TASK, tools=[SHELL], require_tool_call=True)
    causes = [(a.cause, a.status) for a in response.attempts]
    assert causes == [
        ("throttled", 429),
        ("throttled" if api == "messages" else "server", 529 if api == "messages" else 503),
        ("server", 500),
        ("transport", 408),
        ("transport", 409),
        ("transport", None),
        ("transport", None),
        ("malformed", 200),
        ("malformed", 200),
        ("malformed", 200),
        ("ok", 200),
    ]
    # 30 s honoured, then the backoff continues from where it was, capped at 60 s
    assert clock.sleeps == [30.0, 2.0, 4.0, 8.0, 16.0, 32.0, 60.0, 60.0, 60.0, 60.0]
    assert [a.wait for a in response.attempts] == [*clock.sleeps, 0.0]
    assert len(fake.requests) == 11  # the SDK retried nothing on its own
    broken = "input is not a JSON object" if api == "messages" else "arguments are not JSON"
    assert response.attempts[-2].error == f"tool call {broken}"
    missing = "neither a message nor a tool call" if api == "responses" else "has none"
    assert missing in (response.attempts[-3].error or "")
    assert response.latency == pytest.approx(sum(clock.sleeps))


async def test_ten_consecutive_resets_give_up(
    fake: FakeModelServer, client: ProviderAdapter, clock: FakeClock
) -> None:
    fake.inject(Fault.reset(), times=10)
    with pytest.raises(RetriesExhausted) as info:
        await client.complete(TASK)
    assert info.value.cause == "transport" and len(info.value.attempts) == 10
    assert len(fake.requests) == 10 and len(clock.sleeps) == 9


async def test_throttling_in_between_resets_the_transport_streak(
    fake: FakeModelServer, client: ProviderAdapter
) -> None:
    fake.inject(*[Fault.status(408)] * 9, Fault.status(429), *[Fault.reset()] * 9)
    response = await client.complete(TASK)
    assert len(response.attempts) == 20 and response.attempts[-1].cause == "ok"


async def test_ten_missing_tool_calls_give_up_even_with_transport_errors_between(
    fake: FakeModelServer, client: ProviderAdapter
) -> None:
    fake.inject(Fault.missing_tool_calls(), Fault.reset(), times=10)
    with pytest.raises(RetriesExhausted) as info:
        await client.complete(TASK, tools=[SHELL], require_tool_call=True)
    assert info.value.cause == "malformed"
    assert [a.cause for a in info.value.attempts].count("malformed") == 10
    assert len(info.value.attempts) == 19


async def test_missing_tool_calls_are_malformed_without_asking(
    replies: Replies, fake: FakeModelServer, client: ProviderAdapter
) -> None:
    # The finish reason says tool calls (Responses: an empty completed turn) but there
    # are none: retried like any malformed answer, require_tool_call or not.
    replies.append(Reply.tool("shell", cmd="ls"))
    fake.inject(Fault.missing_tool_calls())
    response = await client.complete(TASK, tools=[SHELL])
    assert [a.cause for a in response.attempts] == ["malformed", "ok"]
    assert response.tool_calls[0].name == "shell"


async def test_a_call_to_an_unknown_tool_is_returned_not_retried(
    replies: Replies, fake: FakeModelServer, client: ProviderAdapter
) -> None:
    # Resending the same history mostly gets the same call back; the caller answers it
    # with a tool result instead (see ToolAgent).
    replies += [Reply.tool("rm_rf", path="/"), Reply.tool("shell", cmd="ls")]
    response = await client.complete(TASK, tools=[SHELL], require_tool_call=True)
    assert [a.cause for a in response.attempts] == ["ok"] and len(fake.requests) == 1
    assert [(c.name, c.arguments) for c in response.tool_calls] == [("rm_rf", {"path": "/"})]


@pytest.mark.parametrize("status", [400, 401, 403, 404, 422])
async def test_other_4xx_refuse_at_once(
    status: int, fake: FakeModelServer, client: ProviderAdapter, clock: FakeClock
) -> None:
    fake.inject(Fault.status(status, message="nope, not like this"))
    with pytest.raises(ModelRequestError) as info:
        await client.complete(TASK)
    assert info.value.status == status and "nope, not like this" in str(info.value)
    assert len(fake.requests) == 1 and clock.sleeps == []


async def test_413_compacts_once_and_never_resends_the_same_bytes(
    replies: Replies, fake: FakeModelServer, client: ProviderAdapter
) -> None:
    history = [*TASK]
    for n in range(6):
        history += [
            {
                "role": "assistant",
                "content": None,
                "tool_calls": [
                    {
                        "id": f"c{n}",
                        "type": "function",
                        "function": {"name": "shell", "arguments": "{}"},
                    }
                ],
            },
            {"role": "tool", "tool_call_id": f"c{n}", "content": "x" * 500},
        ]
    fake.inject(Fault.status(413))
    response = await client.complete(history, tools=[SHELL])
    first, second = fake.requests
    assert len(second.body) < len(first.body)
    assert any(CHECKPOINT in str(m.get("content")) for m in second.messages)
    assert [a.cause for a in response.attempts] == ["oversize", "ok"]
    fake.inject(Fault.status(413), times=2)
    with pytest.raises(PayloadTooLarge):
        await client.complete(history, tools=[SHELL])
    bodies = [r.body for r in fake.requests[2:]]
    assert len(bodies) == 2 and bodies[1] != bodies[0]


async def test_413_compacts_a_long_answer_even_when_the_message_count_stays(
    fake: FakeModelServer, client: ProviderAdapter
) -> None:
    # One long assistant answer becomes one checkpoint message: as many messages, but
    # fewer bytes, so the rewrite is sent.
    history = [
        {"role": "user", "content": "task " * 50},
        {"role": "assistant", "content": "long answer " * 500},
        {"role": "user", "content": "continue"},
    ]
    fake.inject(Fault.status(413))
    response = await client.complete(history)
    assert [a.cause for a in response.attempts] == ["oversize", "ok"]
    first, second = fake.requests
    assert len(second.body) < len(first.body)
    assert any(CHECKPOINT in str(m.get("content")) for m in second.messages)


async def test_413_with_nothing_to_drop_is_payload_too_large(
    fake: FakeModelServer, client: ProviderAdapter
) -> None:
    fake.inject(Fault.status(413))
    with pytest.raises(PayloadTooLarge) as info:
        await client.complete(TASK)
    assert len(fake.requests) == 1 and info.value.status == 413


async def test_the_context_policy_compacts_before_sending(
    fake: FakeModelServer,
) -> None:
    history = [*TASK] + [
        m
        for n in range(30)
        for m in (
            {
                "role": "assistant",
                "content": None,
                "tool_calls": [
                    {
                        "id": f"c{n}",
                        "type": "function",
                        "function": {"name": "shell", "arguments": "{}"},
                    }
                ],
            },
            {"role": "tool", "tool_call_id": f"c{n}", "content": "y" * 300},
        )
    ]
    async with model_client(spec_for("chat", fake), context=ContextPolicy(max_bytes=4000)) as m:
        await m.complete(history)
    sent = fake.requests[0].json["messages"]
    assert len(orjson.dumps(sent)) <= 2000 and sent[2]["content"].startswith(CHECKPOINT)


async def test_a_timeout_is_a_transport_failure(fake: FakeModelServer, clock: FakeClock) -> None:
    fake.inject(Fault.slow(2.0))
    async with model_client(spec_for("chat", fake), timeout=0.2, retry=EXACT, clock=clock) as m:
        response = await m.complete(TASK)
    assert response.attempts[0].cause == "transport"
    assert "HttpTimeout" in (response.attempts[0].error or "")


@pytest.mark.parametrize("api_name", APIS)
async def test_connection_refused_gives_up_after_ten(api_name: str) -> None:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    url = f"http://127.0.0.1:{port}" + ("" if api_name == "messages" else "/v1")
    name = {"chat": "vllm", "responses": "openai-responses", "messages": "anthropic"}[api_name]
    clock = FakeClock()
    async with model_client(f"{name}/m@{url}", retry=EXACT, clock=clock) as m:
        with pytest.raises(RetriesExhausted) as info:
            await m.complete(TASK)
    assert len(info.value.attempts) == 10
    assert all("HttpConnectError" in (a.error or "") for a in info.value.attempts)


async def test_a_configured_policy_changes_the_limits(fake: FakeModelServer) -> None:
    policy = RetryPolicy(max_transport=2, base_delay=0.5, multiplier=3.0, jitter=0.0)
    clock = FakeClock()
    fake.inject(Fault.reset(), times=3)
    async with model_client(spec_for("chat", fake), retry=policy, clock=clock) as m:
        with pytest.raises(RetriesExhausted):
            await m.complete(TASK)
    assert clock.sleeps == [0.5] and len(fake.requests) == 2


# -- construction ---------------------------------------------------------------------


def test_a_missing_key_for_a_hosted_provider_is_a_model_error(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.delenv("OPENAI_API_KEY", raising=False)
    with pytest.raises(ModelError, match="OPENAI_API_KEY"):
        model_client("openai/gpt-4.1-mini")


async def test_the_key_comes_from_the_environment(
    monkeypatch: pytest.MonkeyPatch, fake: FakeModelServer
) -> None:
    monkeypatch.setenv("OPENAI_API_KEY", "sk-from-env")
    async with model_client(f"openai/gpt-4o@{fake.url}") as m:
        await m.complete(TASK)
    async with model_client(
        f"openai/gpt-4o@{fake.url}", api_key="sk-explicit", headers={"X-Team": "a"}
    ) as m:
        await m.complete(TASK)
    assert fake.requests[0].headers.get("authorization") == "Bearer sk-from-env"
    assert fake.requests[1].headers.get("authorization") == "Bearer sk-explicit"
    assert fake.requests[1].headers.get("x-team") == "a"


def test_garbage_model_strings_fail_before_any_sdk_loads() -> None:
    with pytest.raises(ValueError, match="not a model string"):
        model_client("gpt-4")


def test_an_adapter_whose_body_takes_the_session_key_is_told_where_it_went() -> None:
    with pytest.raises(TypeError, match=r"session_params\(session_key\)"):

        class Old(ProviderAdapter):  # body() as it was before session_params()
            def body(self, messages, tools, session_key, params):  # type: ignore[override]
                return {}
