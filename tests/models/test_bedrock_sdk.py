"""The fake Bedrock against AWS's own SDK (boto3, retries off), and SigV4-signed chat
completions (`mantle/`) through `aws_client`."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Callable
from pathlib import Path
from typing import Any

import pytest

from _support.aws import isolated_aws
from _support.images import png_bytes
from proctor._errors import ModelRequestError
from proctor._http import HttpClient
from proctor.models import aws_client
from proctor.testing import FakeBedrockServer, Reply

boto3 = pytest.importorskip("boto3")
from botocore.config import Config  # type: ignore[import-untyped, unused-ignore]  # noqa: E402
from botocore.exceptions import ClientError  # type: ignore[import-untyped, unused-ignore]  # noqa: E402

MODEL = "anthropic.claude-sonnet-4-5-20250929-v1:0"
TEXT_ONLY = "meta.llama3-8b-instruct-v1:0"
NO_RETRIES = Config(retries={"total_max_attempts": 1, "mode": "standard"})

Use = Callable[[FakeBedrockServer], None]


@pytest.fixture
def aws_env(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> Use:
    return isolated_aws(monkeypatch, tmp_path)


@pytest.fixture
async def fake() -> AsyncIterator[FakeBedrockServer]:
    script = [
        Reply.tool(
            "shell",
            command="ls",
        ),
        Reply("done", cached_tokens=4, input_tokens=20),
    ]
    async with FakeBedrockServer(script, models=(MODEL,), text_only=(TEXT_ONLY,)) as server:
        yield server


def _runtime(fake: FakeBedrockServer) -> Any:
    session = boto3.session.Session()  # a fresh chain: the default session caches it
    return session.client("bedrock-runtime", endpoint_url=fake.origin, config=NO_RETRIES)


async def test_boto3_converse_with_image_and_forced_tool(
    fake: FakeBedrockServer, aws_env: Use
) -> None:
    aws_env(fake)
    tools = {
        "tools": [{"toolSpec": {"name": "shell", "inputSchema": {"json": {"type": "object"}}}}],
        "toolChoice": {"tool": {"name": "shell"}},
    }
    image = {"image": {"format": "png", "source": {"bytes": png_bytes(200, 1)}}}

    def converse() -> tuple[dict[str, Any], dict[str, Any]]:
        client = _runtime(fake)
        first = client.converse(
            modelId=MODEL,
            system=[{"text": "act"}],
            messages=[{"role": "user", "content": [{"text": "look"}, image]}],
            toolConfig=tools,
            inferenceConfig={"maxTokens": 100},
        )
        use = first["output"]["message"]["content"][0]["toolUse"]
        result = {"toolResult": {"toolUseId": use["toolUseId"], "content": [{"text": "a.txt"}]}}
        second = client.converse(
            modelId=MODEL,
            messages=[
                {"role": "user", "content": [{"text": "look"}]},
                first["output"]["message"],
                {"role": "user", "content": [result]},
            ],
            toolConfig=tools,
        )
        return first, second

    first, second = await asyncio.to_thread(converse)
    assert first["stopReason"] == "tool_use"
    assert first["output"]["message"]["content"][0]["toolUse"]["input"] == {"command": "ls"}
    assert second["stopReason"] == "end_turn"
    assert second["usage"]["cacheReadInputTokens"] == 4
    assert second["usage"]["inputTokens"] + 4 == 20
    assert not fake.refused


async def test_boto3_validation_and_signature_errors(
    fake: FakeBedrockServer, aws_env: Use, monkeypatch: pytest.MonkeyPatch
) -> None:
    aws_env(fake)
    bad_image = {"image": {"format": "jpeg", "source": {"bytes": png_bytes(100, 1)}}}

    def refused(**kwargs: Any) -> dict[str, Any]:
        try:
            _runtime(fake).converse(modelId=MODEL, **kwargs)
        except ClientError as exc:
            return dict(exc.response["Error"])
        raise AssertionError("not refused")

    error = await asyncio.to_thread(refused, messages=[{"role": "user", "content": [bad_image]}])
    assert error["Code"] == "ValidationException" and "not a jpeg" in error["Message"]
    forced = {
        "tools": [{"toolSpec": {"name": "a", "inputSchema": {"json": {}}}}],
        "toolChoice": {"tool": {"name": "b"}},
    }
    error = await asyncio.to_thread(
        refused, messages=[{"role": "user", "content": [{"text": "x"}]}], toolConfig=forced
    )
    assert error["Code"] == "ValidationException"
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "wrong")
    error = await asyncio.to_thread(
        refused, messages=[{"role": "user", "content": [{"text": "x"}]}]
    )
    assert error["Code"] == "InvalidSignatureException"


async def test_boto3_lists_the_catalog_with_modalities(
    fake: FakeBedrockServer, aws_env: Use
) -> None:
    aws_env(fake)

    def listing() -> dict[str, list[str]]:
        client = boto3.session.Session().client(
            "bedrock", endpoint_url=fake.origin, config=NO_RETRIES
        )
        summaries = client.list_foundation_models()["modelSummaries"]
        return {m["modelId"]: m["inputModalities"] for m in summaries}

    assert await asyncio.to_thread(listing) == {MODEL: ["TEXT", "IMAGE"], TEXT_ONLY: ["TEXT"]}


async def test_signed_chat_completions(fake: FakeBedrockServer, aws_env: Use) -> None:
    aws_env(fake)
    fake._policy = FakeBedrockServer(["signed hello"])._policy
    async with aws_client(fake.mantle_string()) as client:
        response = await client.complete([{"role": "user", "content": "hi"}])
    assert response.content == "signed hello"
    (request,) = fake.requests
    assert request.api == "chat" and request.path == "/v1/chat/completions"
    assert (request.headers.get("authorization") or "").startswith("AWS4-HMAC-SHA256 ")
    async with HttpClient() as http:  # unsigned: refused, never answered
        unsigned = await http.request("POST", fake.url + "/chat/completions", body=b"{}")
        await unsigned.read()
    assert unsigned.status == 403
    assert unsigned.headers.get("x-amzn-errortype") == "MissingAuthenticationTokenException:"


async def test_signed_endpoint_with_another_service_name(aws_env: Use) -> None:
    async with FakeBedrockServer(["ok"], service="execute-api") as fake:
        aws_env(fake)
        async with aws_client(fake.mantle_string()) as client:
            with pytest.raises(
                ModelRequestError, match=r"403.*scoped to a valid region and service"
            ):
                await client.complete([{"role": "user", "content": "hi"}])
        async with aws_client(fake.mantle_string(), aws_service="execute-api") as client:
            assert (await client.complete([{"role": "user", "content": "hi"}])).content == "ok"


async def test_signed_chat_compacts_past_24_messages(fake: FakeBedrockServer, aws_env: Use) -> None:
    aws_env(fake)
    fake._policy = FakeBedrockServer(["short"])._policy
    history: list[dict[str, Any]] = [{"role": "user", "content": "the task"}]
    for i in range(20):
        history += [
            {"role": "assistant", "content": None, "tool_calls": [_call(i)]},
            {"role": "tool", "tool_call_id": f"c{i}", "content": f"outcome {i}"},
        ]
    async with aws_client(fake.mantle_string()) as client:
        assert client.max_request_bytes == 3 * 1024 * 1024
        await client.complete(history)
    sent = fake.requests[0].json["messages"]
    assert len(sent) <= 24
    assert sent[0]["content"] == "the task"
    assert sent[-1]["content"] == "outcome 19"


def _call(i: int) -> dict[str, Any]:
    return {"id": f"c{i}", "type": "function", "function": {"name": "shell", "arguments": "{}"}}


async def test_boto3_reads_the_converse_stream(fake: FakeBedrockServer, aws_env: Use) -> None:
    """The fake's event stream is AWS's binary encoding: botocore checks every CRC."""
    aws_env(fake)

    def stream() -> list[dict[str, Any]]:
        response = _runtime(fake).converse_stream(
            modelId=MODEL,
            messages=[{"role": "user", "content": [{"text": "go"}]}],
            toolConfig={"tools": [{"toolSpec": {"name": "shell", "inputSchema": {"json": {}}}}]},
        )
        return list(response["stream"])

    events = await asyncio.to_thread(stream)
    kinds = [next(iter(e)) for e in events]
    assert kinds == [
        "messageStart",
        "contentBlockStart",
        "contentBlockDelta",
        "contentBlockStop",
        "messageStop",
        "metadata",
    ]
    assert events[1]["contentBlockStart"]["start"]["toolUse"]["name"] == "shell"
    assert events[2]["contentBlockDelta"]["delta"]["toolUse"]["input"] == '{"command":"ls"}'
    assert events[4]["messageStop"]["stopReason"] == "tool_use"
    assert events[5]["metadata"]["usage"]["outputTokens"] > 0
