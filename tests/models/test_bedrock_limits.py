"""Converse's documented image limits: at most 20 images in a message (the client keeps
the newest, as compaction would), each at most 3.75 MB (refused before sending); the
fake refuses what Bedrock refuses."""

from __future__ import annotations

import base64
from collections.abc import AsyncIterator, Callable
from pathlib import Path
from typing import Any

import pytest

from _support.aws import isolated_aws
from _support.images import png_bytes
from proctor.models import ImagePart, aws_client
from proctor.testing import FakeBedrockServer, Reply
from proctor.testing._fake_bedrock_converse import converse_problem

MODEL = "anthropic.claude-sonnet-4-5-20250929-v1:0"


@pytest.fixture
async def fake() -> AsyncIterator[FakeBedrockServer]:
    async with FakeBedrockServer([Reply("seen")], models=(MODEL,)) as server:
        yield server


@pytest.fixture
def aws_env(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> Callable[[FakeBedrockServer], None]:
    return isolated_aws(monkeypatch, tmp_path)


def _frames(tmp_path: Path, count: int, size: int = 64) -> list[dict[str, Any]]:
    parts = []
    for seed in range(count):
        path = tmp_path / f"f{seed}.png"
        path.write_bytes(png_bytes(size, seed))
        parts.append(ImagePart.file(path).to_dict())
    return parts


def _images(block: dict[str, Any]) -> list[bytes]:
    inner = block["toolResult"]["content"] if "toolResult" in block else [block]
    return [base64.b64decode(b["image"]["source"]["bytes"]) for b in inner if "image" in b]


async def test_a_message_over_twenty_images_keeps_the_newest(
    fake: FakeBedrockServer, aws_env: Callable[[FakeBedrockServer], None], tmp_path: Path
) -> None:
    aws_env(fake)
    call = {"id": "c1", "type": "function", "function": {"name": "look", "arguments": "{}"}}
    history: list[dict[str, Any]] = [
        {"role": "user", "content": "watch"},
        {"role": "assistant", "content": None, "tool_calls": [call]},
        {"role": "tool", "tool_call_id": "c1", "content": _frames(tmp_path, 23)},
    ]
    async with aws_client(fake.model_string()) as client:
        reply = await client.complete(history)
    assert reply.content == "seen"  # the fake, as Bedrock, took it
    (block,) = fake.requests[0].json["messages"][-1]["content"][:1]
    assert _images(block) == [png_bytes(64, seed) for seed in range(3, 23)]
    texts = [b.get("text") for b in block["toolResult"]["content"]]
    assert texts[:4] == ["[frame omitted]"] * 3 + [None]


async def test_an_image_over_three_and_three_quarter_megabytes_is_refused_before_sending(
    fake: FakeBedrockServer, aws_env: Callable[[FakeBedrockServer], None], tmp_path: Path
) -> None:
    aws_env(fake)
    (big,) = _frames(tmp_path, 1, size=3_800_000)
    async with aws_client(fake.model_string()) as client:
        with pytest.raises(ValueError, match=r"at most 3\.75 MB, not 3\.80 MB"):
            await client.complete([{"role": "user", "content": [big]}])
    assert not fake.requests


def test_the_fake_refuses_what_bedrock_refuses() -> None:
    png = base64.b64encode(png_bytes(64)).decode()
    image = {"image": {"format": "png", "source": {"bytes": png}}}
    many = {"messages": [{"role": "user", "content": [image] * 21}]}
    assert converse_problem(many, {MODEL}, MODEL) == (
        "messages.0: a message can include up to 20 images."
    )
    assert (
        converse_problem({"messages": [{"role": "user", "content": [image] * 20}]}, {MODEL}, MODEL)
        is None
    )
    huge = base64.b64encode(png_bytes(4_000_000)).decode()
    big = {"image": {"format": "png", "source": {"bytes": huge}}}
    assert converse_problem({"messages": [{"role": "user", "content": [big]}]}, {MODEL}, MODEL) == (
        "messages.0: the image size must be no more than 3.75 MB."
    )
