"""Each provider's own codes, headers and limits, through the official SDKs against the
local fake: Fireworks' 425 and "body too long", advisory headers on a 5xx, router ids,
affinity headers, a thinking budget under the output ceiling, `reasoning_content`."""

from __future__ import annotations

from typing import Any

import pytest

from proctor.models import RetryPolicy, ToolSpec, model_client
from proctor.models._retry import classify_status
from proctor.testing import FakeClock, FakeModelServer, Fault, Reply

EXACT = RetryPolicy(jitter=0.0)
SHELL = ToolSpec("shell", "Run a command.", {"type": "object", "properties": {}})
TASK: list[dict[str, Any]] = [
    {"role": "system", "content": "Be brief."},
    {"role": "user", "content": "List files."},
]
Replies = list[Reply | str]


@pytest.mark.parametrize(
    "status, body, cause",
    [
        (425, b'{"error":{"message":"Too early"}}', "server"),
        (400, b'{"error":{"message":"Request body too long (9000000 bytes)"}}', "oversize"),
        (
            400,
            {
                "type": "error",
                "error": {
                    "type": "invalid_request_error",
                    "message": "prompt is too long: 210000 tokens > 200000 maximum",
                },
            },
            "oversize",
        ),
        (400, {"error": {"code": "context_length_exceeded", "message": "..."}}, "oversize"),
        (400, {"error": {"message": "Invalid tool schema"}}, "refused"),
        (400, b"body too long", "oversize"),
    ],
)
def test_each_providers_codes_are_classified(status: int, body: Any, cause: str) -> None:
    assert classify_status(status, body) == cause


def fireworks(fake: FakeModelServer, model: str = "accounts/fireworks/models/kimi-k2") -> str:
    return f"fireworks/{model}@{fake.url}"


async def test_425_and_a_5xx_that_says_do_not_retry_are_retried(
    replies: Replies, fake: FakeModelServer
) -> None:
    replies.append("ok")
    fake.inject(
        Fault.status(425, message="Too early"),
        Fault.status(503, headers={"x-should-retry": "false"}),
    )
    clock = FakeClock()
    async with model_client(fireworks(fake), retry=EXACT, clock=clock) as client:
        response = await client.complete(TASK)
    assert [(a.cause, a.status) for a in response.attempts] == [
        ("server", 425),
        ("server", 503),
        ("ok", 200),
    ]
    assert len(fake.requests) == 3 and clock.sleeps == [1.0, 2.0]


@pytest.mark.parametrize(
    "message",
    ["Request body too long: 9437184 bytes, the limit is 8388608", "prompt is too long"],
)
async def test_a_body_too_long_400_compacts_and_retries_the_turn(
    replies: Replies, fake: FakeModelServer, message: str
) -> None:
    replies.append("done")
    history = [*TASK]
    for n in range(6):
        call = {"id": f"c{n}", "type": "function", "function": {"name": "shell", "arguments": "{}"}}
        history += [
            {"role": "assistant", "content": None, "tool_calls": [call]},
            {"role": "tool", "tool_call_id": f"c{n}", "content": "x" * 500},
        ]
    fake.inject(Fault.status(400, message=message))
    async with model_client(fireworks(fake), retry=EXACT, clock=FakeClock()) as client:
        response = await client.complete(history, tools=[SHELL])
    first, second = fake.requests
    assert len(second.body) < len(first.body)
    assert [a.cause for a in response.attempts] == ["oversize", "ok"]
    assert response.content == "done"


async def test_fireworks_router_ids_send_no_service_tier_and_affinity_headers(
    fake: FakeModelServer,
) -> None:
    router = fireworks(fake, "accounts/fireworks/routers/kimi-k2-fast")
    async with model_client(router, params={"service_tier": "priority"}) as client:
        await client.complete(TASK, session_key="rollout-7")
    async with model_client(fireworks(fake), params={"service_tier": "priority"}) as client:
        await client.complete(TASK, session_key="rollout-8")
    routed, deployed = fake.requests
    assert "service_tier" not in routed.json and deployed.json["service_tier"] == "priority"
    for seen, key in ((routed, "rollout-7"), (deployed, "rollout-8")):
        assert seen.headers.get("x-session-affinity") == key
        assert seen.headers.get("x-multi-turn-session-id") == key
        assert "x-session-id" not in seen.headers


async def test_reasoning_content_goes_back_with_its_tool_call(
    replies: Replies, fake: FakeModelServer
) -> None:
    thought = "The listing first, then the answer."
    for provider in ("fireworks", "openai"):
        replies += [Reply(tool_calls=Reply.tool("shell").tool_calls, reasoning=thought), "done"]
        spec = fireworks(fake) if provider == "fireworks" else f"openai/gpt-4.1@{fake.url}"
        async with model_client(spec) as client:
            first = await client.complete(TASK, tools=[SHELL])
            assert first.message["reasoning_content"] == thought
            call_id = first.tool_calls[0].id
            result = {"role": "tool", "tool_call_id": call_id, "content": "a.txt"}
            await client.complete([*TASK, first.message, result], tools=[SHELL])
        sent = fake.requests[-1].json["messages"][2]
        if provider == "fireworks":
            assert sent["reasoning_content"] == thought and sent["tool_calls"][0]["id"] == call_id
        else:  # OpenAI refuses the field on input messages
            assert "reasoning_content" not in sent


async def test_a_thinking_budget_stays_under_the_output_ceiling(fake: FakeModelServer) -> None:
    thinking = {"type": "enabled", "budget_tokens": 4000}
    async with model_client(f"anthropic/claude-sonnet-4-5@{fake.origin}") as client:
        await client.complete(TASK, max_tokens=2048, thinking=thinking)
        with pytest.raises(ValueError, match="budget_tokens 4000 does not fit under max_tokens"):
            await client.complete(TASK, max_tokens=1000, thinking=thinking)
    async with model_client(fireworks(fake)) as client:
        await client.complete(TASK, max_tokens=300, thinking=thinking)
    anthropic, chat = fake.requests
    assert anthropic.json["thinking"] == {"type": "enabled", "budget_tokens": 2047}
    assert anthropic.json["max_tokens"] == 2048
    assert chat.json["thinking"]["budget_tokens"] == 299
    assert thinking["budget_tokens"] == 4000  # the caller's dict is untouched
