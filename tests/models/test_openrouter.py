"""OpenRouter's stateless Responses API through the `openai` SDK against the local fake:
the input only grows turn over turn, one session key routes and caches the rollout."""

from __future__ import annotations

from typing import Any

import orjson
import pytest

from _support.images import png_bytes
from proctor.models import ImagePart, ToolSpec, model_client
from proctor.models._openrouter import OpenRouterResponsesAdapter
from proctor.testing import FakeModelServer, FakeRequest, Reply

SHELL = ToolSpec("shell", "Run a command.", {"type": "object", "properties": {}})
TASK: list[dict[str, Any]] = [
    {"role": "system", "content": "Be brief."},
    {"role": "user", "content": "List files."},
]


class AppendOnly:
    """A fake-server policy that refuses (400) any input that is not the previous
    request's input plus new items, byte for byte, then answers from `script`."""

    def __init__(self, script: list[Reply]) -> None:
        self.script = iter(script)
        self.inputs: list[list[Any]] = []

    def __call__(self, request: FakeRequest) -> Reply:
        items = request.json["input"]
        if self.inputs:
            last = self.inputs[-1]
            if len(items) <= len(last) or orjson.dumps(items[: len(last)]) != orjson.dumps(last):
                raise AssertionError(f"turn {len(self.inputs) + 1} rewrote the history")
        self.inputs.append(items)
        return next(self.script)


@pytest.mark.parametrize("model", ["anthropic/claude-sonnet-4.5", "openai/gpt-5-mini"])
async def test_the_history_is_append_only_and_one_session_routes_it(model: str) -> None:
    script = [
        Reply.tool("shell", cmd="ls"),
        Reply(text="Two files.", tool_calls=Reply.tool("shell", cmd="cat a").tool_calls),
        Reply(text="a.txt holds 1."),
        Reply(text="Bye."),
    ]
    policy = AppendOnly(script)
    async with (
        FakeModelServer(policy) as fake,
        model_client(f"openrouter/{model}@{fake.url}?api=responses") as client,
    ):
        assert isinstance(client, OpenRouterResponsesAdapter)
        history = [*TASK]
        image = ImagePart("image/png", data=png_bytes(64, 1)).to_dict()
        for turn in range(3):
            response = await client.complete(history, tools=[SHELL], session_key="rollout-9")
            history.append(response.message)
            for call in response.tool_calls:
                content: Any = [{"type": "text", "text": f"out {turn}"}, image]
                history.append({"role": "tool", "tool_call_id": call.id, "content": content})
        history.append({"role": "user", "content": "Thanks."})
        await client.complete(history, tools=[SHELL], session_key="rollout-9")
    assert fake.errors == [] and len(policy.inputs) == 4
    first, *_, last = fake.requests
    assert last.json["input"][: len(first.json["input"])] == first.json["input"]
    kinds = [i.get("type") or i["role"] for i in last.json["input"]]
    assert kinds == [
        "system",
        "user",
        "function_call",
        "function_call_output",
        "user",  # the result's image follows the outputs
        "message",
        "function_call",
        "function_call_output",
        "user",
        "message",
        "user",
    ]
    for seen in fake.requests:
        assert seen.json["session_id"] == seen.json["prompt_cache_key"] == "rollout-9"
        assert "x-session-id" not in seen.headers
        automatic = {"type": "ephemeral"} if model.startswith("anthropic/") else None
        assert seen.json.get("cache_control") == automatic
    output = last.json["input"][3]["output"]
    assert isinstance(output, str) and output.startswith("out 0")


async def test_the_responses_provider_name_and_usage(replies: list[Any], fake: Any) -> None:
    replies.append(Reply(text="ok", input_tokens=50, cached_tokens=40, reasoning_tokens=3))
    async with model_client(f"openrouter-responses/openai/gpt-5@{fake.url}") as client:
        assert isinstance(client, OpenRouterResponsesAdapter)
        response = await client.complete(TASK, session_key="k")
    assert fake.requests[0].path == "/v1/responses"
    assert response.usage.cached_input_tokens == 40 and response.usage.reasoning_tokens == 3
    assert response.cost is not None and response.cost > 0  # priced as openai/gpt-5
    assert fake.requests[0].json["session_id"] == "k"
