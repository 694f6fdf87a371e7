"""Bedrock Converse through `aws_client`, against the SigV4-checking fake."""

from __future__ import annotations

import base64
from collections.abc import AsyncIterator, Callable
from pathlib import Path
from typing import Any

import pytest

from _support.aws import isolated_aws
from proctor._errors import ModelError, ModelRequestError
from proctor.models import (
    ImagePart,
    RetryPolicy,
    ToolSpec,
    aws_client,
    model_client,
    parse_model,
    price_of,
)
from proctor.testing import FakeBedrockServer, FakeClock, Fault, Reply

MODEL = "anthropic.claude-sonnet-4-5-20250929-v1:0"
SHELL = ToolSpec(
    "shell", "Run a command.", {"type": "object", "properties": {"command": {"type": "string"}}}
)


@pytest.fixture
def aws_env(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> Callable[[FakeBedrockServer], None]:
    return isolated_aws(monkeypatch, tmp_path)


@pytest.fixture
async def fake() -> AsyncIterator[FakeBedrockServer]:
    async with FakeBedrockServer(
        [], models=(MODEL,), text_only=("meta.llama3-8b-instruct-v1:0",)
    ) as server:
        yield server


def _script(fake: FakeBedrockServer, *replies: Reply | str) -> None:
    fake._policy = FakeBedrockServer(list(replies))._policy  # a fresh script per test


async def test_text_turn_is_signed_and_priced(
    fake: FakeBedrockServer, aws_env: Callable[[FakeBedrockServer], None]
) -> None:
    aws_env(fake)
    _script(fake, Reply("hello there", input_tokens=1000, output_tokens=10))
    async with aws_client(fake.model_string()) as client:
        response = await client.complete(
            [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "hi"}],
            max_tokens=64,
            temperature=0.2,
        )
    assert response.content == "hello there"
    assert response.finish_reason == "stop"
    assert response.usage.input_tokens == 1000 and response.usage.output_tokens == 10
    assert response.cost == pytest.approx((1000 * 3.0 + 10 * 15.0) / 1e6)
    (request,) = fake.requests
    assert request.path == f"/model/{MODEL.replace(':', '%3A')}/converse"
    assert request.json["system"][0] == {"text": "Be brief."}
    assert request.json["inferenceConfig"] == {"maxTokens": 64, "temperature": 0.2}
    assert (request.headers.get("authorization") or "").startswith(
        "AWS4-HMAC-SHA256 Credential=AKIA"
    )
    assert "/us-east-1/bedrock/aws4_request" in (request.headers.get("authorization") or "")
    assert fake.environ()["AWS_SECRET_ACCESS_KEY"] not in str(list(request.headers.items()))
    assert not fake.refused


async def test_forced_tool_then_tool_result_with_image(
    fake: FakeBedrockServer,
    aws_env: Callable[[FakeBedrockServer], None],
    frame: Callable[..., ImagePart],
) -> None:
    aws_env(fake)
    _script(fake, Reply.tool("shell", command="ls"), "I see the screen.")
    history: list[dict[str, Any]] = [{"role": "user", "content": "list files"}]
    async with aws_client(fake.model_string()) as client:
        first = await client.complete(
            history,
            tools=[SHELL],
            require_tool_call=True,
            tool_choice={"type": "function", "function": {"name": "shell"}},
        )
        (call,) = first.tool_calls
        assert (call.name, call.arguments) == ("shell", {"command": "ls"})
        assert first.finish_reason == "tool_calls"
        history += [
            first.message,
            {
                "role": "tool",
                "tool_call_id": call.id,
                "content": [{"type": "text", "text": "a.txt"}, frame(256).to_dict()],
            },
        ]
        second = await client.complete(history, tools=[SHELL])
    assert second.content == "I see the screen."
    body = fake.requests[0].json
    assert body["toolConfig"]["toolChoice"] == {"tool": {"name": "shell"}}
    assert body["toolConfig"]["tools"][0]["toolSpec"]["inputSchema"]["json"] == SHELL.parameters
    turns = fake.requests[1].json["messages"]
    assert [t["role"] for t in turns] == ["user", "assistant", "user"]
    assert turns[1]["content"][0]["toolUse"]["toolUseId"] == call.id
    result = turns[2]["content"][0]["toolResult"]
    image = result["content"][1]["image"]
    assert image["format"] == "png"
    assert base64.b64decode(image["source"]["bytes"]).startswith(b"\x89PNG")


async def test_user_image_and_cache_points(
    fake: FakeBedrockServer,
    aws_env: Callable[[FakeBedrockServer], None],
    frame: Callable[..., ImagePart],
) -> None:
    aws_env(fake)
    _script(fake, Reply("a cat", input_tokens=500, cached_tokens=300, cache_write_tokens=100))
    async with aws_client(fake.model_string()) as client:
        response = await client.complete(
            [
                {"role": "system", "content": "You see images."},
                {
                    "role": "user",
                    "content": [{"type": "text", "text": "what is it?"}, frame(128).to_dict()],
                },
            ]
        )
    usage = response.usage
    assert (usage.input_tokens, usage.cached_input_tokens, usage.cache_write_tokens) == (
        500,
        300,
        100,
    )
    body = fake.requests[0].json
    assert body["system"][-1] == {"cachePoint": {"type": "default"}}
    user = body["messages"][0]["content"]
    assert user[1]["image"]["format"] == "png" and user[-1] == {"cachePoint": {"type": "default"}}


async def test_wrong_secret_is_refused_like_aws(
    fake: FakeBedrockServer,
    aws_env: Callable[[FakeBedrockServer], None],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    aws_env(fake)
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "not-the-secret")
    async with aws_client(
        fake.model_string(), retry=RetryPolicy(jitter=0.0), clock=FakeClock()
    ) as client:
        with pytest.raises(ModelRequestError, match="403: InvalidSignatureException"):
            await client.complete([{"role": "user", "content": "hi"}])
    assert [e.kind for e in fake.refused] == ["InvalidSignatureException"]
    assert not fake.requests


async def test_unknown_key_and_other_region_are_refused(
    fake: FakeBedrockServer,
    aws_env: Callable[[FakeBedrockServer], None],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    aws_env(fake)
    async with aws_client(fake.model_string(), aws_region="eu-west-1") as client:
        with pytest.raises(ModelRequestError, match="InvalidSignatureException"):
            await client.complete([{"role": "user", "content": "hi"}])
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", "AKIAUNKNOWN000000000")
    async with aws_client(fake.model_string()) as client:
        with pytest.raises(ModelRequestError, match="UnrecognizedClientException"):
            await client.complete([{"role": "user", "content": "hi"}])


async def test_throttling_and_unavailable_are_retried(
    fake: FakeBedrockServer, aws_env: Callable[[FakeBedrockServer], None]
) -> None:
    aws_env(fake)
    _script(fake, "ok")
    fake.inject(
        Fault.status(429, message="Too many requests"),
        Fault.status(503),
        Fault.missing_tool_calls(),
    )
    clock = FakeClock()
    async with aws_client(
        fake.model_string(), retry=RetryPolicy(jitter=0.0), clock=clock
    ) as client:
        response = await client.complete([{"role": "user", "content": "hi"}], tools=[SHELL])
    assert response.content == "ok"
    assert [a.cause for a in response.attempts] == ["throttled", "server", "malformed", "ok"]
    assert "ThrottlingException" in (response.attempts[0].error or "")


async def test_validation_error_is_refused_once(
    fake: FakeBedrockServer, aws_env: Callable[[FakeBedrockServer], None]
) -> None:
    aws_env(fake)
    async with aws_client(fake.model_string("anthropic.claude-nonexistent-v1:0")) as client:
        with pytest.raises(
            ModelRequestError, match="ValidationException: The provided model identifier"
        ):
            await client.complete([{"role": "user", "content": "hi"}])


async def test_credentials_from_a_profile(
    fake: FakeBedrockServer,
    aws_env: Callable[[FakeBedrockServer], None],
    monkeypatch: pytest.MonkeyPatch,
    tmp_path: Path,
) -> None:
    env = fake.environ()
    (tmp_path / "credentials").write_text(
        f"[work]\naws_access_key_id = {env['AWS_ACCESS_KEY_ID']}\n"
        f"aws_secret_access_key = {env['AWS_SECRET_ACCESS_KEY']}\n"
    )
    (tmp_path / "config").write_text("[profile work]\nregion = us-east-1\n")
    monkeypatch.setenv("AWS_SHARED_CREDENTIALS_FILE", str(tmp_path / "credentials"))
    monkeypatch.setenv("AWS_CONFIG_FILE", str(tmp_path / "config"))
    for name in ("AWS_REGION", "AWS_DEFAULT_REGION"):
        monkeypatch.delenv(name, raising=False)
    _script(fake, "from the profile")
    async with aws_client(fake.model_string(), aws_profile="work") as client:
        assert (
            await client.complete([{"role": "user", "content": "hi"}])
        ).content == "from the profile"
    with pytest.raises(ModelError, match="AWS profile not found"):
        aws_client(fake.model_string(), aws_profile="missing")


def test_no_credentials_is_one_clear_error(
    aws_env: Callable[[FakeBedrockServer], None], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("AWS_REGION", "us-east-1")
    with pytest.raises(ModelError, match="no AWS credentials found"):
        aws_client(f"bedrock/{MODEL}")


def test_model_strings() -> None:
    spec = parse_model(f"bedrock/{MODEL}")
    assert (spec.api, spec.auth, spec.model, spec.base_url) == ("converse", "sigv4", MODEL, "")
    assert spec.auth_headers("x") == {}
    mantle = parse_model("mantle/openai.gpt-oss-120b@https://bedrock-mantle.us-east-1.api.aws/v1")
    assert (mantle.api, mantle.auth) == ("chat", "sigv4")
    with pytest.raises(ValueError, match="needs its SigV4-signed endpoint"):
        parse_model("mantle/openai.gpt-oss-120b")
    with pytest.raises(ValueError, match="converse API is bedrock"):
        parse_model("openai/gpt-4.1?api=converse")
    with pytest.raises(ValueError, match="not a SigV4 model string"):
        aws_client("openai/gpt-4.1")


def test_bedrock_ids_are_priced_as_their_vendor_models() -> None:
    vendor = price_of("claude-sonnet-4-5")
    assert vendor is not None
    assert price_of(MODEL) == price_of(f"us.{MODEL}") == price_of(f"bedrock/{MODEL}") == vendor
    assert price_of("amazon.titan-text-express-v1") is None
    assert price_of("gpt-4.1-mini") is not None


async def test_reasoning_is_kept_and_replayed_with_its_tool_call(
    fake: FakeBedrockServer, aws_env: Callable[[FakeBedrockServer], None]
) -> None:
    aws_env(fake)
    thinking = Reply(reasoning="The user wants files.", tool_calls=Reply.tool("shell").tool_calls)
    _script(fake, thinking, "listed")
    history: list[dict[str, Any]] = [{"role": "user", "content": "list files"}]
    async with aws_client(fake.model_string()) as client:
        first = await client.complete(history, tools=[SHELL])
        assert first.message["reasoning_content"] == "The user wants files."
        (call,) = first.tool_calls
        history += [first.message, {"role": "tool", "tool_call_id": call.id, "content": "a.txt"}]
        await client.complete(history, tools=[SHELL])
    replayed = fake.requests[1].json["messages"][1]["content"]
    assert replayed[0] == {"reasoningContent": {"reasoningText": {"text": "The user wants files."}}}
    assert replayed[1]["toolUse"]["toolUseId"] == call.id


async def test_bedrock_error_types_follow_the_retry_contract(
    fake: FakeBedrockServer, aws_env: Callable[[FakeBedrockServer], None]
) -> None:
    aws_env(fake)
    _script(fake, "ok")
    fake.inject(
        Fault.status(429, headers={"x-amzn-errortype": "ModelNotReadyException"}),
        Fault.status(408),  # ModelTimeoutException
        Fault.status(400, message="Input is too long for requested model."),
    )
    history = [{"role": "user", "content": "the task"}]
    for i in range(12):
        history += [
            {"role": "assistant", "content": f"step {i} " * 50},
            {"role": "user", "content": "go on"},
        ]
    async with aws_client(
        fake.model_string(), retry=RetryPolicy(jitter=0.0), clock=FakeClock()
    ) as client:
        response = await client.complete(history)
    assert [a.cause for a in response.attempts] == ["throttled", "transport", "oversize", "ok"]
    assert "ModelNotReadyException" in (response.attempts[0].error or "")
    sizes = [len(r.body) for r in fake.requests]
    assert sizes[3] <= sizes[2] // 2  # one rewrite to at most half the refused body


def test_a_signature_is_bound_to_its_body_and_its_time() -> None:
    """A captured signed request cannot be replayed with another body, nor minutes later."""
    import datetime

    from botocore.credentials import Credentials  # type: ignore[import-untyped, unused-ignore]

    from proctor._http import Headers, Request
    from proctor.models import AwsSigner
    from proctor.testing._fake_bedrock import FAKE_AWS_ACCESS_KEY, FAKE_AWS_SECRET_KEY
    from proctor.testing._fake_bedrock_sigv4 import _SignatureError, check_signature

    signer = AwsSigner(
        "bedrock", "us-east-1", Credentials(FAKE_AWS_ACCESS_KEY, FAKE_AWS_SECRET_KEY)
    )
    url = "http://127.0.0.1:9/model/m/converse"
    body = b'{"messages": []}'
    headers = signer.sign("POST", url, [("content-type", "application/json")], body)
    fields = Headers([*headers, ("host", "127.0.0.1:9")])

    def check(payload: bytes, minutes: float = 0) -> None:
        now = datetime.datetime.now(datetime.UTC) + datetime.timedelta(minutes=minutes)
        check_signature(
            Request("POST", "/model/m/converse", fields, payload),
            access_key=FAKE_AWS_ACCESS_KEY,
            secret_key=FAKE_AWS_SECRET_KEY,
            region="us-east-1",
            service="bedrock",
            now=now,
        )

    check(body)
    with pytest.raises(_SignatureError, match="does not match") as tampered:
        check(b'{"messages": [1]}')
    assert tampered.value.kind == "InvalidSignatureException"
    with pytest.raises(_SignatureError, match="Signature expired"):
        check(body, minutes=6)
    assert FAKE_AWS_SECRET_KEY not in repr(signer)


async def test_model_client_routes_a_bedrock_string_to_converse(
    fake: FakeBedrockServer, aws_env: Callable[[FakeBedrockServer], None]
) -> None:
    """`model_client("bedrock/...")` was an OpenAI Chat client with no base URL, whose
    calls failed as transport errors after ten retries."""
    aws_env(fake)
    _script(fake, Reply("signed", input_tokens=5, output_tokens=1))
    async with model_client(fake.model_string()) as client:
        response = await client.complete([{"role": "user", "content": "hi"}], max_tokens=8)
    assert response.content == "signed"
    (request,) = fake.requests
    assert request.path.endswith("/converse")


async def test_signed_clients_refuse_a_stream_before_sending(
    fake: FakeBedrockServer, aws_env: Callable[[FakeBedrockServer], None]
) -> None:
    """Converse and signed chat answer whole responses, as the SDK adapters do."""
    aws_env(fake)
    for spec in (fake.model_string(), fake.mantle_string()):
        async with aws_client(spec) as client:
            with pytest.raises(ValueError, match="stream=True is not supported"):
                await client.complete([{"role": "user", "content": "hi"}], stream=True)
    assert not fake.requests
