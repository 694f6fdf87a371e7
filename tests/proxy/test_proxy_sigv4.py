"""The proxy forwards a harness's unsigned Chat Completions to a SigV4-signed upstream,
signed with the driver's AWS credentials, which never reach the harness or the trace."""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable
from pathlib import Path

import openai
import orjson
import pytest

from _support.aws import isolated_aws
from proctor.proxy import InterceptionProxy, Upstream
from proctor.records import Trace
from proctor.testing import FakeBedrockServer, FakeClock

MODEL = "openai.gpt-oss-120b-1:0"
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


def test_a_converse_model_is_not_an_upstream() -> None:
    with pytest.raises(ValueError, match="cannot be a proxy upstream"):
        Upstream.of("bedrock/anthropic.claude-sonnet-4-5-20250929-v1:0")


def test_the_signer_stays_out_of_repr(fake: FakeBedrockServer, aws_env: Use) -> None:
    aws_env(fake)
    upstream = Upstream.of(fake.mantle_string())
    assert upstream.signer is not None
    assert fake.environ()["AWS_SECRET_ACCESS_KEY"] not in repr(upstream)
