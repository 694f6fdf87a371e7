"""Anthropic server-side compaction through the `anthropic` SDK against the local fake,
which checks the beta header and the blocks as the API does."""

from __future__ import annotations

from typing import Any

import anthropic
import pytest

from proctor.models import ModelProfile, ToolSpec, _profiles, model_client, register_profile
from proctor.testing import FakeModelServer, Fault, Reply

SHELL = ToolSpec("shell", "Run a command.", {"type": "object", "properties": {}})
TASK: list[dict[str, Any]] = [
    {"role": "system", "content": "Be brief."},
    {"role": "user", "content": "List files."},
]
SUMMARY = "Summary: the user wants the files listed; nothing ran yet."
Replies = list[Reply | str]


def claude(fake: FakeModelServer) -> str:
    return f"anthropic/claude-opus-4-6@{fake.origin}"


def compacted() -> Reply:
    return Reply(compaction=SUMMARY, tool_calls=Reply.tool("shell").tool_calls)


async def next_turn(client: Any, first: Any) -> None:
    result = {"role": "tool", "tool_call_id": first.tool_calls[0].id, "content": "a.txt"}
    await client.complete([*TASK, first.message, result], tools=[SHELL])


async def test_the_edit_goes_with_its_header_and_the_block_comes_back_verbatim(
    replies: Replies, fake: FakeModelServer
) -> None:
    replies += [compacted(), "done"]
    async with model_client(claude(fake), server_compaction=150_000) as client:
        first = await client.complete(TASK, tools=[SHELL])
        assert first.message["compaction"] == {"type": "compaction", "content": SUMMARY}
        await next_turn(client, first)
    assert fake.errors == []
    for seen in fake.requests:
        assert seen.headers.get("anthropic-beta") == "compact-2026-01-12"
        edit = seen.json["context_management"]["edits"][0]
        assert edit == {
            "type": "compact_20260112",
            "trigger": {"type": "input_tokens", "value": 150000},
        }
    replayed = fake.requests[1].json["messages"][1]
    assert replayed["role"] == "assistant"
    assert replayed["content"][0] == {"type": "compaction", "content": SUMMARY}
    assert replayed["content"][1]["type"] == "tool_use"


async def test_a_refused_edit_is_sent_again_without_it_and_stays_off(
    replies: Replies, fake: FakeModelServer
) -> None:
    replies += [compacted(), "done"]
    fake.inject(Fault.status(400, message="context_management: compaction is not supported"))
    async with model_client(claude(fake), server_compaction=150_000) as client:
        first = await client.complete(TASK, tools=[SHELL])
        assert [a.cause for a in first.attempts] == ["ok"]
        assert "compaction" not in first.message  # the retry asked for none
        await next_turn(client, first)
    refused, *plain = fake.requests
    assert "context_management" in refused.json and len(plain) == 2
    for seen in plain:
        assert "context_management" not in seen.json and "anthropic-beta" not in seen.headers


async def test_an_empty_compaction_block_is_not_replayed(
    replies: Replies, fake: FakeModelServer
) -> None:
    replies += [Reply(compaction="", tool_calls=Reply.tool("shell").tool_calls), "done"]
    async with model_client(claude(fake), server_compaction=150_000) as client:
        first = await client.complete(TASK, tools=[SHELL])
        assert "compaction" not in first.message
        await next_turn(client, first)
    blocks = fake.requests[1].json["messages"][1]["content"]
    assert [b["type"] for b in blocks] == ["tool_use"]


async def test_a_model_on_client_compaction_sends_no_header_and_gets_no_block(
    replies: Replies, fake: FakeModelServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(_profiles, "_REGISTERED", dict(_profiles._REGISTERED))
    register_profile(ModelProfile("local-sonnet", 1, f"anthropic/claude-sonnet-4-5@{fake.origin}"))
    replies += [compacted(), "done"]
    async with model_client("profile:local-sonnet@1") as client:
        first = await client.complete(TASK, tools=[SHELL])
        await next_turn(client, first)
    assert "compaction" not in first.message
    for seen in fake.requests:
        assert "anthropic-beta" not in seen.headers and "context_management" not in seen.json


def test_the_built_in_compaction_profile_uses_the_documented_default() -> None:
    profile = _profiles.model_profile("anthropic-claude-opus-4-6-compaction@1")
    assert profile.server_compaction == 150_000 and profile.spec.api == "messages"


@pytest.mark.parametrize(
    "spec, trigger, message",
    [
        ("anthropic/claude-opus-4-6@http://127.0.0.1:1", 20_000, "50000 input tokens or more"),
        ("openai/gpt-5@http://127.0.0.1:1/v1", 150_000, "Anthropic Messages', not chat's"),
    ],
)
def test_a_bad_compaction_setting_is_refused(spec: str, trigger: int, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        model_client(spec, server_compaction=trigger)


async def test_the_fake_refuses_compaction_without_the_beta_header(fake: FakeModelServer) -> None:
    sdk = anthropic.AsyncAnthropic(base_url=fake.origin, api_key="x", max_retries=0)
    edits = {"edits": [{"type": "compact_20260112"}]}
    replay: list[Any] = [
        {"role": "user", "content": "hi"},
        {"role": "assistant", "content": [{"type": "compaction", "content": SUMMARY}]},
        {"role": "user", "content": "go on"},
    ]
    async with sdk:
        for body in ({"context_management": edits}, {}):
            messages = replay if not body else replay[:1]
            with pytest.raises(anthropic.BadRequestError, match="compact-2026-01-12"):
                await sdk.messages.create(
                    model="m", max_tokens=10, messages=messages, extra_body=body
                )
        low = {
            "edits": [
                {"type": "compact_20260112", "trigger": {"type": "input_tokens", "value": 10}}
            ]
        }
        with pytest.raises(anthropic.BadRequestError, match="at least 50000"):
            await sdk.messages.create(
                model="m",
                max_tokens=10,
                messages=replay[:1],
                extra_body={"context_management": low},
                extra_headers={"anthropic-beta": "compact-2026-01-12"},
            )
