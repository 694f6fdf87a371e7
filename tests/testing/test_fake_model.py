"""FakeModelServer speaks each wire format well enough for the official SDKs to parse it."""

# The SDKs' typed unions (a response or a stream, a block of any kind) are what the
# fake is tested against: narrowing each one would only restate the assertions.
# mypy: disable-error-code="union-attr, arg-type, call-overload, index, list-item, misc"

from __future__ import annotations

import json
import time
from typing import Any

import anthropic
import openai
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from proctor.testing import FakeModelServer, FakeRequest, FakeToolCall, Reply

USER = [{"role": "user", "content": "hello"}]
SHELL = {"type": "function", "function": {"name": "shell", "parameters": {"type": "object"}}}
USAGE = Reply(
    text="Hi there!", input_tokens=100, cached_tokens=60, output_tokens=20, reasoning_tokens=12
)
Replies = list[Reply | str]


def call(name: str, **arguments: Any) -> FakeToolCall:
    return FakeToolCall(name, arguments)


# -- Chat Completions ---------------------------------------------------------------------


async def test_chat_text_and_usage(
    replies: Replies, fake: FakeModelServer, oai: openai.AsyncOpenAI
) -> None:
    replies.append(USAGE)
    out = await oai.chat.completions.create(model="gpt-x", messages=USER)
    choice = out.choices[0]
    assert (choice.message.content, choice.finish_reason) == ("Hi there!", "stop")
    assert out.model == "gpt-x"
    usage = out.usage
    assert usage is not None
    assert (usage.prompt_tokens, usage.completion_tokens, usage.total_tokens) == (100, 20, 120)
    assert usage.prompt_tokens_details and usage.prompt_tokens_details.cached_tokens == 60
    assert usage.completion_tokens_details
    assert usage.completion_tokens_details.reasoning_tokens == 12
    (request,) = fake.requests
    assert (request.api, request.model, request.stream) == ("chat", "gpt-x", False)
    assert request.messages == USER


async def test_usage_is_computed_when_not_scripted(
    replies: Replies, fake: FakeModelServer, oai: openai.AsyncOpenAI
) -> None:
    replies.append(Reply(text="one two three", reasoning_tokens=5))
    out = await oai.chat.completions.create(model="m", messages=USER)
    assert out.usage is not None
    assert out.usage.completion_tokens == 3 + 5
    assert out.usage.prompt_tokens == (len(fake.requests[0].body) + 3) // 4


async def test_chat_stream_with_usage_chunk(replies: Replies, oai: openai.AsyncOpenAI) -> None:
    replies.append(USAGE)
    stream = await oai.chat.completions.create(
        model="m", messages=USER, stream=True, stream_options={"include_usage": True}
    )
    chunks = [chunk async for chunk in stream]
    assert chunks[0].choices[0].delta.role == "assistant"
    text = "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
    assert text == "Hi there!"
    assert [c.choices[0].finish_reason for c in chunks if c.choices][-1] == "stop"
    assert all(c.usage is None for c in chunks[:-1])
    assert chunks[-1].choices == [] and chunks[-1].usage is not None
    assert chunks[-1].usage.completion_tokens == 20


async def test_chat_stream_without_usage_has_no_usage_chunk(oai: openai.AsyncOpenAI) -> None:
    stream = await oai.chat.completions.create(model="m", messages=USER, stream=True)
    chunks = [chunk async for chunk in stream]
    assert all(c.choices and c.usage is None for c in chunks)


async def test_chat_tool_calls(
    replies: Replies, fake: FakeModelServer, oai: openai.AsyncOpenAI
) -> None:
    calls = [call("shell", command="ls -la"), FakeToolCall("read", {"path": "/x"}, id="c9")]
    replies.append(Reply(text="Let me look.", tool_calls=calls))
    out = await oai.chat.completions.create(model="m", messages=USER, tools=[SHELL])
    message = out.choices[0].message
    assert out.choices[0].finish_reason == "tool_calls"
    assert message.content == "Let me look."
    got = [(c.function.name, json.loads(c.function.arguments), c.id) for c in message.tool_calls]
    assert got[0][:2] == ("shell", {"command": "ls -la"}) and got[0][2].startswith("call_")
    assert got[1] == ("read", {"path": "/x"}, "c9")
    assert fake.requests[0].tool_names == ["shell"]


async def test_chat_stream_helper_assembles_tool_calls(
    replies: Replies, oai: openai.AsyncOpenAI
) -> None:
    replies.append(Reply(tool_calls=[call("shell", command="echo hi"), call("shell", c="pwd")]))
    async with oai.chat.completions.stream(model="m", messages=USER, tools=[SHELL]) as stream:
        kinds = {event.type async for event in stream}
        final = await stream.get_final_completion()
    assert "tool_calls.function.arguments.delta" in kinds
    calls = final.choices[0].message.tool_calls or []
    assert [json.loads(c.function.arguments) for c in calls] == [
        {"command": "echo hi"},
        {"c": "pwd"},
    ]
    assert final.choices[0].finish_reason == "tool_calls"


async def test_chunks_sets_the_number_of_deltas(replies: Replies, oai: openai.AsyncOpenAI) -> None:
    text = "a b c d e f g h i j"
    replies += [Reply(text=text), Reply(text=text, chunks=3)]
    deltas = []
    for _ in range(2):
        stream = await oai.chat.completions.create(model="m", messages=USER, stream=True)
        deltas.append([c.choices[0].delta.content async for c in stream][1:-1])
    assert len(deltas[0]) == 10 and len(deltas[1]) == 3
    assert "".join(deltas[1]) == text


async def test_chunk_delay_spaces_the_events(replies: Replies, oai: openai.AsyncOpenAI) -> None:
    replies.append(Reply(text="a b c", chunk_delay=0.03))
    stream = await oai.chat.completions.create(model="m", messages=USER, stream=True)
    arrivals = [time.monotonic() async for _ in stream]
    assert len(arrivals) == 5
    assert arrivals[-1] - arrivals[0] >= 0.03 * 3


async def test_vllm_logprobs_and_token_ids(replies: Replies, oai: openai.AsyncOpenAI) -> None:
    replies += ["The cat sat."] * 2
    extra = {"return_tokens_as_token_ids": True, "return_token_ids": True}
    kwargs: dict[str, Any] = {"model": "m", "messages": USER, "logprobs": True, "top_logprobs": 3}
    raw = (await oai.chat.completions.create(**kwargs, extra_body=extra)).model_dump()
    choice = raw["choices"][0]
    entries = choice["logprobs"]["content"]
    assert len(entries) == len(choice["token_ids"]) == raw["usage"]["completion_tokens"] == 4
    assert [e["token"] for e in entries] == [f"token_id:{i}" for i in choice["token_ids"]]
    assert all(len(e["top_logprobs"]) == 3 and e["logprob"] <= 0 for e in entries)
    assert bytes(b for e in entries for b in e["bytes"]) == b"The cat sat."
    assert len(raw["prompt_token_ids"]) == raw["usage"]["prompt_tokens"]

    options = {"include_usage": True}
    stream = await oai.chat.completions.create(
        **kwargs, stream=True, stream_options=options, extra_body=extra
    )
    chunks = [c.model_dump() async for c in stream]
    assert len(chunks[0]["prompt_token_ids"]) == chunks[-1]["usage"]["prompt_tokens"]
    ids = [i for c in chunks[:-1] for i in c["choices"][0].get("token_ids") or ()]
    assert ids == choice["token_ids"]


async def test_logprobs_are_plain_tokens_by_default(
    replies: Replies, oai: openai.AsyncOpenAI
) -> None:
    replies.append("The cat sat.")
    out = await oai.chat.completions.create(model="m", messages=USER, logprobs=True)
    logprobs = out.choices[0].logprobs
    assert logprobs and logprobs.content
    assert [t.token for t in logprobs.content] == ["The", " cat", " sat", "."]
    assert all(t.top_logprobs == [] for t in logprobs.content)
    assert "prompt_token_ids" not in out.model_dump()


@settings(
    max_examples=30, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(text=st.text(min_size=1, max_size=60))
async def test_any_text_streams_back_whole(
    replies: Replies, oai: openai.AsyncOpenAI, text: str
) -> None:
    replies.append(Reply(text=text))
    stream = await oai.chat.completions.create(model="m", messages=USER, stream=True, logprobs=True)
    chunks = [c async for c in stream]
    assert "".join(c.choices[0].delta.content or "" for c in chunks) == text
    logprobs = [c.choices[0].logprobs for c in chunks if c.choices[0].logprobs]
    assert "".join(t.token for lp in logprobs for t in lp.content or ()) == text


# -- Responses ------------------------------------------------------------------------------


async def test_responses_text_and_usage(
    replies: Replies, fake: FakeModelServer, oai: openai.AsyncOpenAI
) -> None:
    replies.append(USAGE)
    out = await oai.responses.create(model="m", input="hello", instructions="be brief")
    assert (out.output_text, out.status) == ("Hi there!", "completed")
    assert [item.type for item in out.output] == ["reasoning", "message"]
    usage = out.usage
    assert usage is not None
    assert (usage.input_tokens, usage.output_tokens, usage.total_tokens) == (100, 20, 120)
    assert usage.input_tokens_details.cached_tokens == 60
    assert usage.output_tokens_details.reasoning_tokens == 12
    assert fake.requests[0].messages == [
        {"role": "system", "content": "be brief"},
        {"role": "user", "content": "hello"},
    ]


async def test_responses_tool_call(replies: Replies, oai: openai.AsyncOpenAI) -> None:
    replies.append(Reply.tool("shell", command="ls"))
    out = await oai.responses.create(model="m", input="hello")
    (item,) = out.output
    assert item.type == "function_call"
    assert (item.name, json.loads(item.arguments)) == ("shell", {"command": "ls"})
    assert item.call_id.startswith("call_")


async def test_responses_stream_events(replies: Replies, oai: openai.AsyncOpenAI) -> None:
    replies.append(Reply(text="Hi there", tool_calls=[call("shell", c=1)]))
    stream = await oai.responses.create(model="m", input="hello", stream=True)
    events = [event async for event in stream]
    assert [e.sequence_number for e in events] == list(range(len(events)))
    kinds = [e.type for e in events]
    assert kinds[:2] == ["response.created", "response.in_progress"]
    assert kinds[2 : kinds.index("response.output_item.done") + 1] == [
        "response.output_item.added",
        "response.content_part.added",
        "response.output_text.delta",
        "response.output_text.delta",
        "response.output_text.done",
        "response.content_part.done",
        "response.output_item.done",
    ]
    assert "response.function_call_arguments.delta" in kinds
    assert "response.function_call_arguments.done" in kinds
    done = events[-1]
    assert done.type == "response.completed" and done.response.usage is not None


async def test_responses_stream_helper(replies: Replies, oai: openai.AsyncOpenAI) -> None:
    replies.append(Reply(text="Hi there", tool_calls=[call("shell", c=1)], cached_tokens=2))
    async with oai.responses.stream(model="m", input="hello") as stream:
        async for _ in stream:
            pass
        final = await stream.get_final_response()
    assert final.output_text == "Hi there"
    assert final.output[-1].type == "function_call"
    assert final.usage and final.usage.input_tokens_details.cached_tokens == 2


async def test_responses_length_is_incomplete(replies: Replies, oai: openai.AsyncOpenAI) -> None:
    replies += [Reply(text="cut", finish_reason="length")] * 2
    out = await oai.responses.create(model="m", input="x")
    assert out.status == "incomplete" and out.incomplete_details
    assert out.incomplete_details.reason == "max_output_tokens"
    stream = await oai.responses.create(model="m", input="x", stream=True)
    assert [e.type async for e in stream][-1] == "response.incomplete"


async def test_responses_logprobs_when_included(replies: Replies, oai: openai.AsyncOpenAI) -> None:
    replies.append("a b")
    out = await oai.responses.create(
        model="m", input="x", top_logprobs=2, include=["message.output_text.logprobs"]
    )
    part = out.output[0].content[0]
    assert [lp.token for lp in part.logprobs] == ["a", " b"]
    assert all(len(lp.top_logprobs) == 2 for lp in part.logprobs)


async def test_responses_input_items_are_normalized(
    fake: FakeModelServer, oai: openai.AsyncOpenAI
) -> None:
    arguments = '{"c":"ls"}'
    await oai.responses.create(
        model="m",
        input=[
            {"role": "user", "content": [{"type": "input_text", "text": "list files"}]},
            {"type": "function_call", "call_id": "c1", "name": "shell", "arguments": arguments},
            {"type": "function_call_output", "call_id": "c1", "output": "a.txt"},
        ],
    )
    function = {"name": "shell", "arguments": arguments}
    assert fake.requests[0].messages == [
        {"role": "user", "content": "list files"},
        {
            "role": "assistant",
            "content": None,
            "tool_calls": [{"id": "c1", "type": "function", "function": function}],
        },
        {"role": "tool", "tool_call_id": "c1", "content": "a.txt"},
    ]


# -- Anthropic Messages --------------------------------------------------------------------


async def test_messages_text_and_usage(
    replies: Replies, fake: FakeModelServer, ant: anthropic.AsyncAnthropic
) -> None:
    replies.append(
        Reply(
            text="Hi!", input_tokens=100, cached_tokens=60, cache_write_tokens=30, output_tokens=7
        )
    )
    out = await ant.messages.create(model="claude-x", max_tokens=50, messages=USER)
    assert [(b.type, b.text) for b in out.content] == [("text", "Hi!")]
    assert (out.stop_reason, out.model) == ("end_turn", "claude-x")
    usage = out.usage
    assert usage.input_tokens == 10  # Anthropic counts cache reads and writes apart
    assert (usage.cache_read_input_tokens, usage.cache_creation_input_tokens) == (60, 30)
    assert usage.output_tokens == 7
    assert fake.requests[0].api == "messages"


async def test_messages_tool_use_and_normalized_history(
    replies: Replies, fake: FakeModelServer, ant: anthropic.AsyncAnthropic
) -> None:
    replies.append(Reply.tool("shell", command="ls"))
    result = {
        "type": "tool_result",
        "tool_use_id": "t1",
        "content": [{"type": "text", "text": "/"}],
    }
    history: Any = [
        {"role": "user", "content": "go"},
        {
            "role": "assistant",
            "content": [
                {"type": "text", "text": "ok"},
                {"type": "tool_use", "id": "t1", "name": "shell", "input": {"c": "pwd"}},
            ],
        },
        {"role": "user", "content": [result, {"type": "text", "text": "next"}]},
    ]
    out = await ant.messages.create(model="c", max_tokens=50, system="sys", messages=history)
    (block,) = out.content
    assert block.type == "tool_use" and (block.name, block.input) == ("shell", {"command": "ls"})
    assert block.id.startswith("toolu_") and out.stop_reason == "tool_use"
    function = {"name": "shell", "arguments": '{"c":"pwd"}'}
    assert fake.requests[0].messages == [
        {"role": "system", "content": "sys"},
        {"role": "user", "content": "go"},
        {
            "role": "assistant",
            "content": "ok",
            "tool_calls": [{"id": "t1", "type": "function", "function": function}],
        },
        {"role": "tool", "tool_call_id": "t1", "content": "/"},
        {"role": "user", "content": "next"},
    ]


async def test_messages_stream_events(replies: Replies, ant: anthropic.AsyncAnthropic) -> None:
    replies.append(Reply(text="Hi you", tool_calls=[call("shell", c="ls")]))
    stream = await ant.messages.create(model="c", max_tokens=50, messages=USER, stream=True)
    kinds = [event.type async for event in stream]
    assert kinds[:2] == ["message_start", "content_block_start"]
    assert kinds[-2:] == ["message_delta", "message_stop"]
    assert kinds.count("content_block_start") == kinds.count("content_block_stop") == 2


async def test_messages_stream_helper(replies: Replies, ant: anthropic.AsyncAnthropic) -> None:
    replies.append(
        Reply(
            text="Hi you",
            tool_calls=[call("shell", c="ls")],
            input_tokens=50,
            cached_tokens=5,
            output_tokens=9,
        )
    )
    async with ant.messages.stream(model="c", max_tokens=50, messages=USER) as stream:
        text = "".join([t async for t in stream.text_stream])
        final = await stream.get_final_message()
    assert text == "Hi you"
    assert [b.type for b in final.content] == ["text", "tool_use"]
    assert final.content[1].input == {"c": "ls"}
    usage = final.usage
    assert (usage.input_tokens, usage.cache_read_input_tokens, usage.output_tokens) == (45, 5, 9)
    assert final.stop_reason == "tool_use"


# -- policies, models, routing -------------------------------------------------------------


async def test_policy_callable_sees_the_request() -> None:
    seen: list[FakeRequest] = []

    async def policy(request: FakeRequest) -> str:
        seen.append(request)
        return f"{request.api}:{len(request.messages)}"

    async with (
        FakeModelServer(policy) as fake,
        openai.AsyncOpenAI(base_url=fake.url, api_key="x", max_retries=0) as client,
    ):
        out = await client.chat.completions.create(model="m", messages=USER)
    assert out.choices[0].message.content == "chat:1"
    assert seen == fake.requests


async def test_constant_policy() -> None:
    async with (
        FakeModelServer("always") as fake,
        openai.AsyncOpenAI(base_url=fake.url, api_key="x", max_retries=0) as client,
    ):
        for _ in range(2):
            out = await client.chat.completions.create(model="m", messages=USER)
            assert out.choices[0].message.content == "always"


async def test_default_policy_echoes_the_last_message_in_every_api() -> None:
    tool_result = {"type": "tool_result", "tool_use_id": "t", "content": "files"}
    async with (
        FakeModelServer(record=False) as fake,
        openai.AsyncOpenAI(base_url=fake.url, api_key="x", max_retries=0) as oai,
        anthropic.AsyncAnthropic(base_url=fake.origin, api_key="x", max_retries=0) as ant,
    ):
        chat = await oai.chat.completions.create(model="m", messages=USER)
        responses = await oai.responses.create(
            model="m", input=[{"type": "function_call_output", "call_id": "c", "output": "out"}]
        )
        messages = await ant.messages.create(
            model="c", max_tokens=9, messages=[{"role": "user", "content": [tool_result]}]
        )
    assert chat.choices[0].message.content == "echo: hello"
    assert responses.output_text == "echo: out"
    assert messages.content[0].text == "echo: files"
    assert fake.requests == []


async def test_script_running_out_is_a_400_and_recorded() -> None:
    async with (
        FakeModelServer(["only"]) as fake,
        openai.AsyncOpenAI(base_url=fake.url, api_key="x", max_retries=0) as client,
    ):
        await client.chat.completions.create(model="m", messages=USER)
        with pytest.raises(openai.BadRequestError, match="ran out after 1"):
            await client.chat.completions.create(model="m", messages=USER)
    assert len(fake.requests) == 2 and isinstance(fake.errors[0], LookupError)


async def test_models_listing(oai: openai.AsyncOpenAI, ant: anthropic.AsyncAnthropic) -> None:
    assert [m.id async for m in oai.models.list()] == ["fake-model"]
    assert [m.id async for m in ant.models.list()] == ["fake-model"]


async def test_requests_the_real_api_refuses(
    oai: openai.AsyncOpenAI, ant: anthropic.AsyncAnthropic
) -> None:
    with pytest.raises(anthropic.BadRequestError, match="max_tokens") as info:
        await ant.post("/v1/messages", body={"model": "c", "messages": USER}, cast_to=object)
    assert info.value.body["type"] == "error"
    with pytest.raises(openai.NotFoundError):
        await oai.completions.create(model="m", prompt="x")
