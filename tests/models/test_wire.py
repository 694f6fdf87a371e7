"""Raw provider JSON: usage, validity, chat-shaped messages, and folding SSE streams."""

from __future__ import annotations

from typing import Any

import orjson
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from proctor._http import HttpClient, SSEEvent, SSEParser
from proctor.models import ToolCall, Usage
from proctor.models._wire import (
    StreamAccumulator,
    check_response,
    checked,
    parse_response,
    usage_from,
)
from proctor.testing import FakeModelServer, FakeToolCall, Fault, Reply

# -- usage ----------------------------------------------------------------------------


def test_usage_from_chat_with_cached_and_reasoning_tokens() -> None:
    body = {
        "usage": {
            "prompt_tokens": 1200,
            "completion_tokens": 300,
            "total_tokens": 1500,
            "prompt_tokens_details": {"cached_tokens": 1024, "audio_tokens": 0},
            "completion_tokens_details": {"reasoning_tokens": 256},
        }
    }
    assert usage_from("chat", body) == Usage(1200, 1024, 0, 300, 256)


def test_usage_from_chat_deepseek_cache_hits_and_vllm_nulls() -> None:
    deepseek = {
        "usage": {"prompt_tokens": 100, "completion_tokens": 5, "prompt_cache_hit_tokens": 64}
    }
    assert usage_from("chat", deepseek) == Usage(100, 64, 0, 5, 0)
    vllm = {"usage": {"prompt_tokens": 7, "completion_tokens": 3, "prompt_tokens_details": None}}
    assert usage_from("chat", vllm) == Usage(7, 0, 0, 3, 0)


def test_usage_from_responses() -> None:
    body = {
        "usage": {
            "input_tokens": 2000,
            "input_tokens_details": {"cached_tokens": 1500},
            "output_tokens": 900,
            "output_tokens_details": {"reasoning_tokens": 800},
            "total_tokens": 2900,
        }
    }
    assert usage_from("responses", body) == Usage(2000, 1500, 0, 900, 800)


def test_usage_from_messages_counts_cache_reads_and_writes_as_input() -> None:
    body = {
        "usage": {
            "input_tokens": 50,
            "cache_read_input_tokens": 10000,
            "cache_creation_input_tokens": 2000,
            "output_tokens": 400,
        }
    }
    usage = usage_from("messages", body)
    assert usage == Usage(12050, 10000, 2000, 400, 0)
    assert usage.total_tokens == 12450


@pytest.mark.parametrize(
    "body", [None, [], "x", {}, {"usage": None}, {"usage": {"prompt_tokens": "9"}}]
)
@pytest.mark.parametrize("api", ["chat", "responses", "messages"])
def test_usage_from_garbage_is_zero(api: str, body: Any) -> None:
    assert usage_from(api, body) == Usage()


def test_usage_adds_and_serializes() -> None:
    total = Usage(10, 2, 1, 5, 3) + Usage(1, 1, 1, 1, 1)
    assert total.to_dict() == {
        "input_tokens": 11,
        "cached_input_tokens": 3,
        "cache_write_tokens": 2,
        "output_tokens": 6,
        "reasoning_tokens": 4,
        "total_tokens": 17,
    }


# -- parse and check ------------------------------------------------------------------


def chat(message: dict[str, Any], finish: str = "stop") -> dict[str, Any]:
    return {"choices": [{"index": 0, "message": message, "finish_reason": finish}]}


def chat_call(arguments: Any, name: Any = "shell", call_id: Any = "call_1") -> dict[str, Any]:
    call = {"id": call_id, "type": "function", "function": {"name": name, "arguments": arguments}}
    return chat({"role": "assistant", "content": None, "tool_calls": [call]}, "tool_calls")


def test_parse_chat_tool_call() -> None:
    parsed = parse_response("chat", chat_call('{"cmd": "ls"}'))
    assert parsed.tool_calls == [ToolCall("call_1", "shell", {"cmd": "ls"}, '{"cmd": "ls"}')]
    assert parsed.finish_reason == "tool_calls" and parsed.content is None
    assert parsed.message == {
        "role": "assistant",
        "content": None,
        "tool_calls": [
            {
                "id": "call_1",
                "type": "function",
                "function": {"name": "shell", "arguments": '{"cmd": "ls"}'},
            }
        ],
    }


def test_parse_chat_text_parts_and_empty_arguments() -> None:
    parsed = parse_response(
        "chat",
        chat(
            {
                "role": "assistant",
                "content": [{"type": "text", "text": "a"}, {"type": "text", "text": "b"}],
            }
        ),
    )
    assert parsed.content == "ab" and parsed.tool_calls == []
    assert parse_response("chat", chat_call("")).tool_calls[0].arguments == {}
    assert parse_response("chat", chat_call({"a": 1})).tool_calls[0].raw_arguments == '{"a":1}'


@pytest.mark.parametrize(
    "body, problem",
    [
        ([], "not a JSON object"),
        ({"error": {"message": "boom"}}, "error in response"),
        ({}, "no choices"),
        ({"choices": []}, "no choices"),
        ({"choices": [{"message": None}]}, "no message"),
        (chat({"role": "assistant", "content": 5}), "neither text nor parts"),
        (chat({"role": "assistant", "tool_calls": {"id": 1}}), "not a list"),
        (chat_call('{"cmd": "l'), "not JSON"),
        (chat_call("[1]"), "not a JSON object"),
        (chat_call(7), "not a JSON string"),
        (chat_call("{}", name=""), "without a name"),
        (chat_call("{}", call_id=None), "without an id"),
        (chat({"role": "assistant", "content": "hi"}), None),
    ],
)
def test_check_chat(body: Any, problem: str | None) -> None:
    result = check_response("chat", body)
    assert result is None if problem is None else problem in (result or "")


def test_checked_hands_back_the_answer_or_the_problem() -> None:
    answer = checked("chat", chat({"role": "assistant", "content": "hi"}))
    assert not isinstance(answer, str) and answer.content == "hi"
    assert checked("chat", {"choices": []}) == "no choices"
    promised = {"choices": [{"message": {"role": "assistant"}, "finish_reason": "tool_calls"}]}
    assert checked("chat", promised) == check_response("chat", promised)
    assert "has none" in str(checked("chat", promised))


def test_check_requires_a_known_tool_call_when_asked() -> None:
    text = chat({"role": "assistant", "content": "I'd rather talk"})
    assert check_response("chat", text, require_tool_call=True) == "no tool call"
    call = chat_call("{}")
    assert check_response("chat", call, require_tool_call=True, tool_names={"shell"}) is None
    assert check_response("chat", call, tool_names={"edit"}) == "call to unknown tool 'shell'"


def test_a_tool_call_finish_without_calls_is_a_problem_even_unasked() -> None:
    # "missing or malformed tool-call responses": the finish reason promised calls.
    empty = chat({"role": "assistant", "content": None}, "tool_calls")
    assert "tool calls" in (check_response("chat", empty) or "")
    anthropic = {"type": "message", "content": [], "stop_reason": "tool_use"}
    assert "tool calls" in (check_response("messages", anthropic) or "")
    text = {**anthropic, "content": [{"type": "text", "text": "Let me run it."}]}
    assert "tool calls" in (check_response("messages", text) or "")
    assert check_response("chat", chat({"role": "assistant", "content": None})) is None


def test_a_completed_responses_answer_with_no_message_or_call_is_a_problem() -> None:
    # Responses names no finish reason: its "missing calls" is an empty completed turn.
    assert "neither" in (check_response("responses", responses([])) or "")
    reasoning_only = responses([{"type": "reasoning", "id": "rs_1", "summary": []}])
    assert "neither" in (check_response("responses", reasoning_only) or "")
    cut = responses([], "incomplete", incomplete_details={"reason": "max_output_tokens"})
    assert check_response("responses", cut) is None
    said = responses([{"type": "message", "role": "assistant", "content": []}])
    assert check_response("responses", said) is None


def test_parse_raises_value_error() -> None:
    with pytest.raises(ValueError, match="no choices"):
        parse_response("chat", {})


def responses(output: list[Any], status: str = "completed", **extra: Any) -> dict[str, Any]:
    return {"object": "response", "status": status, "output": output, **extra}


def test_parse_responses_text_and_function_call() -> None:
    body = responses(
        [
            {"type": "reasoning", "id": "rs_1", "summary": []},
            {
                "type": "message",
                "role": "assistant",
                "content": [{"type": "output_text", "text": "Let me look."}],
            },
            {
                "type": "function_call",
                "id": "fc_1",
                "call_id": "call_9",
                "name": "shell",
                "arguments": '{"cmd":"ls"}',
            },
        ]
    )
    parsed = parse_response("responses", body)
    assert parsed.content == "Let me look."
    assert parsed.tool_calls == [ToolCall("call_9", "shell", {"cmd": "ls"}, '{"cmd":"ls"}')]
    assert parsed.finish_reason == "tool_calls"
    assert parse_response("responses", responses([])).finish_reason == "stop"


def test_parse_responses_incomplete_and_failed() -> None:
    cut = responses([], "incomplete", incomplete_details={"reason": "max_output_tokens"})
    assert parse_response("responses", cut).finish_reason == "length"
    assert check_response("responses", responses([], "failed")) == "response failed"
    assert check_response("responses", {"status": "completed"}) == "no output"
    broken = responses([{"type": "function_call", "call_id": "c", "name": "f", "arguments": "{"}])
    assert check_response("responses", broken) == "tool call arguments are not JSON"


def test_parse_messages_text_tool_use_and_thinking() -> None:
    thinking = {"type": "thinking", "thinking": "hmm", "signature": "sig"}
    body = {
        "type": "message",
        "role": "assistant",
        "content": [
            thinking,
            {"type": "text", "text": "Running it."},
            {"type": "tool_use", "id": "toolu_1", "name": "shell", "input": {"cmd": "ls"}},
        ],
        "stop_reason": "tool_use",
    }
    parsed = parse_response("messages", body)
    assert parsed.content == "Running it." and parsed.finish_reason == "tool_calls"
    assert parsed.tool_calls == [ToolCall("toolu_1", "shell", {"cmd": "ls"}, '{"cmd":"ls"}')]
    assert parsed.message["thinking_blocks"] == [thinking]
    assert (
        parse_response("messages", {**body, "stop_reason": "max_tokens"}).finish_reason == "length"
    )
    assert (
        parse_response("messages", {**body, "stop_reason": "pause_turn"}).finish_reason
        == "pause_turn"
    )


def test_check_messages_problems() -> None:
    assert check_response("messages", {"type": "error", "error": {"type": "overloaded_error"}})
    assert check_response("messages", {"type": "message"}) == "no content"
    bad = {"content": [{"type": "tool_use", "id": "t", "name": "f", "input": '{"a'}]}
    assert check_response("messages", bad) == "tool call input is not a JSON object"


@settings(max_examples=300, deadline=None)
@given(
    api=st.sampled_from(["chat", "responses", "messages"]),
    body=st.recursive(
        st.none() | st.booleans() | st.integers() | st.text(max_size=5),
        lambda inner: (
            st.lists(inner, max_size=3)
            | st.dictionaries(
                st.sampled_from(
                    [
                        "choices",
                        "message",
                        "content",
                        "tool_calls",
                        "function",
                        "name",
                        "arguments",
                        "id",
                        "output",
                        "type",
                        "call_id",
                        "input",
                        "status",
                        "text",
                        "error",
                        "usage",
                    ]
                ),
                inner,
                max_size=4,
            )
        ),
        max_leaves=20,
    ),
)
def test_check_response_never_raises(api: str, body: Any) -> None:
    problem = check_response(api, body, require_tool_call=True, tool_names={"shell"})
    if problem is None:
        assert parse_response(api, body).tool_calls
    usage_from(api, body)


# -- StreamAccumulator on real-shaped streams -----------------------------------------


def events(*frames: Any, named: bool = False) -> list[SSEEvent]:
    out = []
    for frame in frames:
        data = frame if isinstance(frame, str) else orjson.dumps(frame).decode()
        name = frame.get("type") if named and isinstance(frame, dict) else None
        out.append(SSEEvent(name, data))
    return out


def fold(api: str, stream: list[SSEEvent]) -> dict[str, Any]:
    acc = StreamAccumulator(api)
    for event in stream:
        acc.feed(event)
    return acc.result()


def chunk(delta: dict[str, Any], finish: str | None = None, **extra: Any) -> dict[str, Any]:
    return {
        "id": "chatcmpl-1",
        "object": "chat.completion.chunk",
        "created": 1700000000,
        "model": "gpt-4.1-mini-2025-04-14",
        "system_fingerprint": "fp_1",
        "choices": [
            {"index": 0, "delta": delta, "logprobs": None, "finish_reason": finish, **extra}
        ],
        "usage": None,
    }


def test_chat_stream_with_tool_calls_and_final_usage_chunk() -> None:
    body = fold(
        "chat",
        events(
            chunk(
                {
                    "role": "assistant",
                    "content": None,
                    "tool_calls": [
                        {
                            "index": 0,
                            "id": "call_a",
                            "type": "function",
                            "function": {"name": "shell", "arguments": ""},
                        }
                    ],
                }
            ),
            chunk({"tool_calls": [{"index": 0, "function": {"arguments": '{"cmd"'}}]}),
            chunk({"tool_calls": [{"index": 0, "function": {"arguments": ': "ls"}'}}]}),
            chunk(
                {
                    "tool_calls": [
                        {
                            "index": 1,
                            "id": "call_b",
                            "type": "function",
                            "function": {"name": "read", "arguments": "{}"},
                        }
                    ]
                }
            ),
            chunk({}, "tool_calls"),
            {
                "id": "chatcmpl-1",
                "object": "chat.completion.chunk",
                "choices": [],
                "usage": {
                    "prompt_tokens": 20,
                    "completion_tokens": 9,
                    "total_tokens": 29,
                    "prompt_tokens_details": {"cached_tokens": 8},
                },
            },
            "[DONE]",
        ),
    )
    assert body["object"] == "chat.completion" and body["model"] == "gpt-4.1-mini-2025-04-14"
    parsed = parse_response("chat", body)
    assert [(c.id, c.name, c.arguments) for c in parsed.tool_calls] == [
        ("call_a", "shell", {"cmd": "ls"}),
        ("call_b", "read", {}),
    ]
    assert parsed.finish_reason == "tool_calls"
    assert usage_from("chat", body) == Usage(20, 8, 0, 9, 0)


def test_chat_stream_text_logprobs_and_vllm_token_ids() -> None:
    lp = [{"token": "Hi", "logprob": -0.1, "top_logprobs": []}]
    body = fold(
        "chat",
        events(
            {**chunk({"role": "assistant", "content": ""}), "prompt_token_ids": [1, 2, 3]},
            chunk({"content": "Hi"}, logprobs={"content": lp}, token_ids=[42]),
            chunk({"content": " there"}, logprobs={"content": lp}, token_ids=[43]),
            chunk({"reasoning_content": "brief"}),
            chunk({}, "stop"),
            "[DONE]",
        ),
    )
    choice = body["choices"][0]
    assert choice["message"]["content"] == "Hi there"
    assert choice["message"]["reasoning_content"] == "brief"
    assert choice["logprobs"]["content"] == lp * 2
    assert choice["token_ids"] == [42, 43] and body["prompt_token_ids"] == [1, 2, 3]
    assert check_response("chat", body) is None


def test_chat_stream_error_chunk_is_kept() -> None:
    body = fold("chat", events(chunk({"content": "par"}), {"error": {"message": "overloaded"}}))
    assert check_response("chat", body) == 'error in response: {"message":"overloaded"}'


def test_anthropic_stream_text_thinking_and_tool_use() -> None:
    stream = events(
        {
            "type": "message_start",
            "message": {
                "id": "msg_1",
                "type": "message",
                "role": "assistant",
                "content": [],
                "model": "claude-sonnet-4-5-20250929",
                "stop_reason": None,
                "stop_sequence": None,
                "usage": {
                    "input_tokens": 25,
                    "cache_creation_input_tokens": 0,
                    "cache_read_input_tokens": 1000,
                    "output_tokens": 1,
                },
            },
        },
        {
            "type": "content_block_start",
            "index": 0,
            "content_block": {"type": "thinking", "thinking": "", "signature": ""},
        },
        {
            "type": "content_block_delta",
            "index": 0,
            "delta": {"type": "thinking_delta", "thinking": "Let me "},
        },
        {
            "type": "content_block_delta",
            "index": 0,
            "delta": {"type": "thinking_delta", "thinking": "think."},
        },
        {
            "type": "content_block_delta",
            "index": 0,
            "delta": {"type": "signature_delta", "signature": "EqQB"},
        },
        {"type": "content_block_stop", "index": 0},
        {"type": "ping"},
        {"type": "content_block_start", "index": 1, "content_block": {"type": "text", "text": ""}},
        {
            "type": "content_block_delta",
            "index": 1,
            "delta": {"type": "text_delta", "text": "Okay"},
        },
        {
            "type": "content_block_delta",
            "index": 1,
            "delta": {"type": "text_delta", "text": ", listing."},
        },
        {"type": "content_block_stop", "index": 1},
        {
            "type": "content_block_start",
            "index": 2,
            "content_block": {"type": "tool_use", "id": "toolu_1", "name": "shell", "input": {}},
        },
        {
            "type": "content_block_delta",
            "index": 2,
            "delta": {"type": "input_json_delta", "partial_json": ""},
        },
        {
            "type": "content_block_delta",
            "index": 2,
            "delta": {"type": "input_json_delta", "partial_json": '{"cmd": '},
        },
        {
            "type": "content_block_delta",
            "index": 2,
            "delta": {"type": "input_json_delta", "partial_json": '"ls"}'},
        },
        {"type": "content_block_stop", "index": 2},
        {
            "type": "message_delta",
            "delta": {"stop_reason": "tool_use", "stop_sequence": None},
            "usage": {"output_tokens": 89},
        },
        {"type": "message_stop"},
        named=True,
    )
    body = fold("messages", stream)
    assert body["content"][0] == {
        "type": "thinking",
        "thinking": "Let me think.",
        "signature": "EqQB",
    }
    parsed = parse_response("messages", body)
    assert parsed.content == "Okay, listing." and parsed.finish_reason == "tool_calls"
    assert parsed.tool_calls[0].arguments == {"cmd": "ls"}
    assert usage_from("messages", body) == Usage(1025, 1000, 0, 89, 0)


def test_anthropic_stream_folds_a_compaction_block_that_goes_back_verbatim() -> None:
    summary = "Summary: listed the files."
    body = fold(
        "messages",
        events(
            {
                "type": "message_start",
                "message": {"id": "m", "content": [], "usage": {"input_tokens": 3}},
            },
            {
                "type": "content_block_start",
                "index": 0,
                "content_block": {"type": "compaction", "content": ""},
            },
            {
                "type": "content_block_delta",
                "index": 0,
                "delta": {"type": "compaction_delta", "content": summary},
            },
            {"type": "content_block_stop", "index": 0},
            {
                "type": "content_block_start",
                "index": 1,
                "content_block": {"type": "text", "text": ""},
            },
            {
                "type": "content_block_delta",
                "index": 1,
                "delta": {"type": "text_delta", "text": "Go"},
            },
            {"type": "content_block_stop", "index": 1},
            {"type": "message_delta", "delta": {"stop_reason": "end_turn"}, "usage": {}},
            named=True,
        ),
    )
    message = parse_response("messages", body).message
    assert message["compaction"] == {"type": "compaction", "content": summary}
    assert message["content"] == "Go"


def test_anthropic_stream_cut_inside_a_tool_call_is_malformed() -> None:
    body = fold(
        "messages",
        events(
            {
                "type": "message_start",
                "message": {"id": "m", "content": [], "usage": {"input_tokens": 3}},
            },
            {
                "type": "content_block_start",
                "index": 0,
                "content_block": {"type": "tool_use", "id": "t", "name": "f", "input": {}},
            },
            {
                "type": "content_block_delta",
                "index": 0,
                "delta": {"type": "input_json_delta", "partial_json": '{"a": '},
            },
        ),
    )
    assert check_response("messages", body) == "tool call input is not a JSON object"


def test_anthropic_stream_error_event() -> None:
    body = fold(
        "messages",
        events(
            {"type": "error", "error": {"type": "overloaded_error", "message": "Overloaded"}},
            named=True,
        ),
    )
    assert "overloaded_error" in (check_response("messages", body) or "")


def test_responses_stream_folds_to_the_completed_response() -> None:
    final = responses(
        [
            {
                "type": "message",
                "id": "msg_1",
                "role": "assistant",
                "status": "completed",
                "content": [{"type": "output_text", "text": "Hello!", "annotations": []}],
            }
        ],
        usage={
            "input_tokens": 10,
            "output_tokens": 2,
            "input_tokens_details": {"cached_tokens": 0},
            "output_tokens_details": {"reasoning_tokens": 0},
        },
    )
    stream = events(
        {
            "type": "response.created",
            "sequence_number": 0,
            "response": responses([], "in_progress"),
        },
        {
            "type": "response.output_item.added",
            "output_index": 0,
            "item": {"type": "message", "id": "msg_1", "role": "assistant", "content": []},
        },
        {
            "type": "response.content_part.added",
            "output_index": 0,
            "content_index": 0,
            "part": {"type": "output_text", "text": ""},
        },
        {
            "type": "response.output_text.delta",
            "output_index": 0,
            "content_index": 0,
            "delta": "Hel",
        },
        {
            "type": "response.output_text.delta",
            "output_index": 0,
            "content_index": 0,
            "delta": "lo!",
        },
        {"type": "response.completed", "response": final},
        named=True,
    )
    body = fold("responses", stream)
    assert body == final
    assert parse_response("responses", body).content == "Hello!"


def test_responses_stream_cut_before_completion_keeps_the_items_so_far() -> None:
    stream = events(
        {"type": "response.created", "response": responses([], "in_progress")},
        {
            "type": "response.output_item.added",
            "output_index": 0,
            "item": {"type": "message", "role": "assistant", "content": []},
        },
        {
            "type": "response.content_part.added",
            "output_index": 0,
            "content_index": 0,
            "part": {"type": "output_text", "text": ""},
        },
        {
            "type": "response.output_text.delta",
            "output_index": 0,
            "content_index": 0,
            "delta": "Hi",
        },
        {
            "type": "response.output_text.delta",
            "output_index": 0,
            "content_index": 5,
            "delta": "lost",
        },
        {
            "type": "response.output_item.added",
            "output_index": 1,
            "item": {"type": "function_call", "call_id": "c1", "name": "f", "arguments": ""},
        },
        {"type": "response.function_call_arguments.delta", "output_index": 1, "delta": '{"x":'},
        {"type": "response.function_call_arguments.delta", "output_index": 1, "delta": "1}"},
        {"type": "error", "code": "server_error", "message": "boom"},
    )
    body = fold("responses", stream)
    assert body["output"][0]["content"][0]["text"] == "Hi"
    assert body["output"][1]["arguments"] == '{"x":1}'
    assert body["error"] == {"code": "server_error", "message": "boom"}


def test_unknown_api_and_non_json_events() -> None:
    with pytest.raises(ValueError, match="unknown api"):
        StreamAccumulator("completions")
    acc = StreamAccumulator("chat")
    for data in ("[DONE]", "", " ", "[1, 2]"):
        acc.feed(SSEEvent(None, data))
    assert acc.events == 0 and acc.problem is None
    assert acc.result() == {"object": "chat.completion", "choices": []}


def test_events_that_are_not_json_make_the_stream_a_problem() -> None:
    acc = StreamAccumulator("chat")
    for event in events(
        chunk({"role": "assistant", "content": "Hel"}),
        '{"id": "chatcmpl-1", "choices": [{"index": 0, "delta": {"content": "lo',
        chunk({}, "stop"),
        "not json either",
        "[DONE]",
    ):
        acc.feed(event)
    assert acc.problem is not None and acc.problem.startswith("2 stream events are not JSON")
    assert '"chatcmpl-1"' in acc.problem
    # The rest still folds: the recorder keeps what arrived.
    assert parse_response("chat", acc.result()).content == "Hel"


# -- streams from the fake server fold to its unstreamed body -------------------------

REPLIES = [
    Reply(
        text="Hello there, how are you today?", input_tokens=40, cached_tokens=4, reasoning_tokens=3
    ),
    Reply(
        text="Calling.",
        input_tokens=40,
        tool_calls=(FakeToolCall("shell", {"cmd": "ls -la"}), FakeToolCall("read", {})),
    ),
    Reply(tool_calls=(FakeToolCall("shell", {"cmd": 'echo "q"\n'}),), input_tokens=9, chunks=3),
    Reply(text="cut", finish_reason="length", input_tokens=40, cache_write_tokens=2),
]

PATHS = {"chat": "/v1/chat/completions", "responses": "/v1/responses", "messages": "/v1/messages"}


def request_body(api: str) -> dict[str, Any]:
    tools = [
        {"type": "function", "function": {"name": n, "parameters": {}}} for n in ("shell", "read")
    ]
    if api == "chat":
        return {"model": "m", "messages": [{"role": "user", "content": "hi"}], "tools": tools}
    if api == "responses":
        return {"model": "m", "input": "hi", "tools": [{"type": "function", "name": "shell"}]}
    return {"model": "m", "max_tokens": 100, "messages": [{"role": "user", "content": "hi"}]}


async def post(client: HttpClient, url: str, body: dict[str, Any]) -> tuple[bytes, list[SSEEvent]]:
    response = await client.request(
        "POST", url, headers=[("content-type", "application/json")], body=orjson.dumps(body)
    )
    data = await response.read()
    return data, SSEParser().feed(data)


@pytest.mark.parametrize("api", ["chat", "responses", "messages"])
@pytest.mark.parametrize("reply", REPLIES, ids=range(len(REPLIES)))
async def test_fake_server_streams_fold_to_the_same_answer(api: str, reply: Reply) -> None:
    async with FakeModelServer(lambda request: reply) as fake, HttpClient() as client:
        url = fake.origin + PATHS[api]
        plain, _ = await post(client, url, request_body(api))
        streamed = {**request_body(api), "stream": True, "stream_options": {"include_usage": True}}
        if api != "chat":
            del streamed["stream_options"]
        _, stream = await post(client, url, streamed)
    whole = orjson.loads(plain)
    acc = StreamAccumulator(api)
    for event in stream:
        acc.feed(event)
    folded = acc.result()
    expected, got = parse_response(api, whole), parse_response(api, folded)
    assert got.content == expected.content
    assert [(c.name, c.arguments) for c in got.tool_calls] == [
        (c.name, c.arguments) for c in expected.tool_calls
    ]
    assert got.finish_reason == expected.finish_reason
    assert usage_from(api, folded) == usage_from(api, whole)


@pytest.mark.parametrize("api", ["chat", "responses", "messages"])
async def test_broken_fake_streams_are_problems(api: str) -> None:
    # What the proxy relays: a stream with a garbled event, or one that promised tool
    # calls and sent none, must not be recorded as a good answer.
    streamed = {**request_body(api), "stream": True}
    async with FakeModelServer() as fake, HttpClient() as client:
        url = fake.origin + PATHS[api]
        fake.inject(Fault.malformed_json())
        _, garbled = await post(client, url, streamed)
        fake.inject(Fault.missing_tool_calls())
        _, empty = await post(client, url, streamed)
        _, fine = await post(client, url, streamed)
    folds = []
    for stream in (garbled, empty, fine):
        acc = StreamAccumulator(api)
        for event in stream:
            acc.feed(event)
        folds.append(acc)
    assert folds[0].problem is not None
    assert folds[1].problem is None and check_response(api, folds[1].result()) is not None
    assert folds[2].problem is None and check_response(api, folds[2].result()) is None
