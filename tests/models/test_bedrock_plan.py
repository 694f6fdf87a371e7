"""The plan's live catalog check for SigV4 models, against the fake's catalogs."""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable
from pathlib import Path

import pytest

from _support.aws import isolated_aws
from proctor.batch._config import BatchConfig
from proctor.batch._plan_models import catalogs
from proctor.testing import FakeBedrockServer

MODEL = "anthropic.claude-sonnet-4-5-20250929-v1:0"
TEXT_ONLY = "meta.llama3-8b-instruct-v1:0"
Use = Callable[[FakeBedrockServer], None]


@pytest.fixture
def aws_env(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> Use:
    return isolated_aws(monkeypatch, tmp_path)


@pytest.fixture
async def fake() -> AsyncIterator[FakeBedrockServer]:
    async with FakeBedrockServer(models=(MODEL,), text_only=(TEXT_ONLY,)) as server:
        yield server


def _config(*models: str) -> BatchConfig:
    agents = [{"kind": "tool", "model": m, "name": f"a{i}"} for i, m in enumerate(models)]
    return BatchConfig.model_validate(
        {
            "taskset": {"source": "tasks.json", "env_source": "env.py"},
            "agents": agents,
            "runtime": {"kind": "subprocess"},
            "expected_rollouts": 1,
            "max_concurrent": 1,
        }
    )


async def test_bedrock_ids_are_checked_in_the_signed_catalog(
    fake: FakeBedrockServer, aws_env: Use
) -> None:
    aws_env(fake)
    config = _config(
        fake.model_string(f"us.{MODEL}"),  # an inference profile: its foundation model
        fake.model_string(TEXT_ONLY),
        fake.model_string("anthropic.claude-gone-v1:0"),
    )
    problems, records = await catalogs(config)
    url = f"{fake.origin}/foundation-models"
    assert problems == [f"model 'anthropic.claude-gone-v1:0' is not in the catalog at {url}"]
    assert records[0]["listed"] == 2 and not fake.refused
    problems, _ = await catalogs(config, images=True)
    no_images = f"model {TEXT_ONLY!r} does not advertise image input at {url}"
    assert f"{no_images}, and the task set sends images" in problems
    assert not any(MODEL in p and "image" in p for p in problems)


async def test_signed_endpoint_models_and_missing_credentials(
    fake: FakeBedrockServer, aws_env: Use, monkeypatch: pytest.MonkeyPatch
) -> None:
    config = _config(fake.mantle_string(MODEL), fake.mantle_string("nope"))
    problems, records = await catalogs(config)  # no credentials yet: said, not crashed
    assert records[0]["error"].startswith("not asked: no AWS credentials found")
    aws_env(fake)
    problems, records = await catalogs(config)
    assert problems == [f"model 'nope' is not in the catalog at {fake.url}/models"]
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "wrong")
    problems, _ = await catalogs(config)
    assert problems == [f"{fake.url}/models: GET answered HTTP 403"]


async def test_a_computer_agent_needs_a_model_that_sees_images(
    fake: FakeBedrockServer, aws_env: Use
) -> None:
    """The plan passed no image requirement: a computer agent on a text-only model ran."""
    aws_env(fake)
    config = BatchConfig.model_validate(
        {
            "taskset": {"source": "tasks.json", "env_source": "env.py"},
            "agents": [
                {"kind": "computer", "model": fake.model_string(TEXT_ONLY), "name": "eyes"},
                {"kind": "tool", "model": fake.model_string(TEXT_ONLY), "name": "words"},
            ],
            "runtime": {"kind": "subprocess"},
            "expected_rollouts": 2,
            "max_concurrent": 1,
        }
    )
    problems, _ = await catalogs(config)
    url = f"{fake.origin}/foundation-models"
    no_images = f"model {TEXT_ONLY!r} does not advertise image input at {url}"
    assert problems == [f"{no_images}, and the task set sends images"]
    words_only = config.model_copy(update={"agents": config.agents[1:], "expected_rollouts": 1})
    assert (await catalogs(words_only))[0] == []  # a tool agent sends no frames
