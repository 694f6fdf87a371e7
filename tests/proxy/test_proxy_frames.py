"""A harness's inline images through the interception proxy: forwarded as sent, recorded
once by digest (files in a batch's `artifacts/frames/`, listed in `SHA256SUMS`)."""

from __future__ import annotations

import asyncio
import base64
import hashlib
import http.client
import json
from collections.abc import AsyncIterator, Iterator
from dataclasses import dataclass
from pathlib import Path
from types import SimpleNamespace
from typing import Any
from urllib.parse import urlsplit

import anthropic
import openai
import pytest

from _support.images import png_bytes
from proctor.batch import BatchStore
from proctor.batch._recording import Recording
from proctor.batch._tally import Tally
from proctor.proxy import InterceptionProxy, ProxySession, Upstream
from proctor.testing import FakeModelServer
from proctor.view import ViewServer

PNG = png_bytes(3000, seed=7)
B64 = base64.b64encode(PNG).decode()
SHA = hashlib.sha256(PNG).hexdigest()
URL = f"data:image/png;base64,{B64}"


@dataclass(frozen=True)
class Assignment:
    rollout_id: str
    task: str = "t"
    agent: str | None = "harness"
    model: str | None = "m"
    repeat: int = 0


@pytest.fixture
async def proxy(fake: FakeModelServer) -> AsyncIterator[InterceptionProxy]:
    async with InterceptionProxy(
        Upstream(fake.url, api_key="sk-up"), Upstream(fake.origin, "anthropic", api_key="sk-up")
    ) as p:
        yield p


@pytest.fixture
def batch(tmp_path: Path) -> Iterator[BatchStore]:
    with BatchStore.create(tmp_path / "out", {}) as store:
        yield store


def record_into(store: BatchStore, session: ProxySession, rid: str = "r1") -> Path:
    """Bind `session` to a rollout of `store` as a batch does; returns its folder."""
    rec = store.begin(Assignment(rid))
    run = SimpleNamespace(proxy_session=session, client=None, prompt="p")
    Recording(run, rec, Tally(1))._entered_agent(run)  # type: ignore[arg-type]
    return Path(rec.folder)


async def test_a_frame_sent_in_ten_turns_is_one_file_and_ten_references(
    fake: FakeModelServer, proxy: InterceptionProxy, batch: BatchStore
) -> None:
    session = proxy.open_session("r1")
    folder = record_into(batch, session)
    client = openai.AsyncOpenAI(base_url=session.base_url, api_key=session.secret, max_retries=0)
    messages: list[Any] = []
    async with client:
        for i in range(10):
            frame = {"type": "image_url", "image_url": {"url": URL}}
            messages.append({"role": "user", "content": [{"type": "text", "text": f"t{i}"}, frame]})
            out = await client.chat.completions.create(model="m", messages=messages)
            messages.append({"role": "assistant", "content": out.choices[0].message.content})
    # Upstream got every frame of every turn, as sent.
    assert [len(r.images) for r in fake.requests] == list(range(1, 11))
    assert all(im.size == len(PNG) for r in fake.requests for im in r.images)
    assert fake.requests[-1].json["messages"][0]["content"][1]["image_url"]["url"] == URL
    frames = folder / "artifacts" / "frames"
    assert [p.name for p in frames.iterdir()] == [f"{SHA}.png"]
    assert (frames / f"{SHA}.png").read_bytes() == PNG
    sums = (folder / "artifacts" / "SHA256SUMS").read_text().splitlines()
    assert sums == [f"{SHA}  frames/{SHA}.png"]
    text = (folder / "model_turns.jsonl").read_text()
    assert B64[:200] not in text and "base64" not in text
    lines = [json.loads(line) for line in text.splitlines()]
    assert len(lines) == 10
    ref = {"type": "image", "media_type": "image/png", "path": f"frames/{SHA}.png", "sha256": SHA}
    refs = [p for t in lines for m in t["context"]["new"] for p in _parts(m) if p == ref]
    assert len(refs) == 10
    assert "request" not in session.turns[-1]  # the sink has it


async def test_responses_and_anthropic_tool_images_become_references(
    fake: FakeModelServer, proxy: InterceptionProxy, batch: BatchStore
) -> None:
    session = proxy.open_session("r2")
    folder = record_into(batch, session, "r2")
    seen: list[dict[str, Any]] = []
    sink = session.on_turn
    assert sink is not None

    def keep(turn: dict[str, Any]) -> None:
        seen.append(turn["request"])
        sink(turn)

    session.on_turn = keep
    oai = openai.AsyncOpenAI(base_url=session.base_url, api_key=session.secret, max_retries=0)
    ant = anthropic.AsyncAnthropic(
        base_url=session.env["ANTHROPIC_BASE_URL"], api_key=session.secret, max_retries=0
    )
    async with oai, ant:
        await oai.responses.create(
            model="m",
            input=[
                {"type": "function_call", "call_id": "c1", "name": "shot", "arguments": "{}"},
                {
                    "type": "function_call_output",
                    "call_id": "c1",
                    "output": [{"type": "input_image", "image_url": URL}],
                },
            ],
        )
        await ant.messages.create(
            model="claude-x",
            max_tokens=50,
            messages=[
                {"role": "user", "content": "go"},
                {
                    "role": "assistant",
                    "content": [{"type": "tool_use", "id": "u1", "name": "shot", "input": {}}],
                },
                {
                    "role": "user",
                    "content": [
                        {
                            "type": "tool_result",
                            "tool_use_id": "u1",
                            "content": [
                                {
                                    "type": "image",
                                    "source": {
                                        "type": "base64",
                                        "media_type": "image/png",
                                        "data": B64,
                                    },
                                }
                            ],
                        }
                    ],
                },
            ],
        )
    assert [im.where for r in fake.requests for im in r.images] == ["tool", "tool"]
    ref = {"type": "image", "media_type": "image/png", "path": f"frames/{SHA}.png", "sha256": SHA}
    assert seen[0]["input"][1]["output"] == [ref]
    assert seen[1]["messages"][2]["content"][0]["content"] == [ref]
    assert len(list((folder / "artifacts" / "frames").iterdir())) == 1
    assert B64[:200] not in (folder / "model_turns.jsonl").read_text()


async def test_without_a_sink_a_frame_is_held_once(
    fake: FakeModelServer, proxy: InterceptionProxy
) -> None:
    session = proxy.open_session("r3")
    client = openai.AsyncOpenAI(base_url=session.base_url, api_key=session.secret, max_retries=0)
    async with client:
        for i in range(3):
            frame = {"type": "image_url", "image_url": {"url": URL}}
            message: Any = {"role": "user", "content": [{"type": "text", "text": f"{i}"}, frame]}
            await client.chat.completions.create(model="m", messages=[message])
    urls = [t["request"]["messages"][0]["content"][1]["image_url"]["url"] for t in session.turns]
    assert urls == [URL] * 3
    assert urls[0] is urls[1] is urls[2]  # one string in memory
    assert session.recorded < len(B64) + 3 * 1000  # the base64 counted once


def _parts(message: Any) -> list[Any]:
    content = message.get("content") if isinstance(message, dict) else None
    return content if isinstance(content, list) else []


async def test_the_dashboard_shows_a_kept_frame(
    fake: FakeModelServer, proxy: InterceptionProxy, tmp_path: Path
) -> None:
    out = tmp_path / "runs" / "b"
    with BatchStore.create(out, {"name": "b", "config": None}) as store:
        store.add_assignments([Assignment("r1")])
        session = proxy.open_session("r1")
        folder = record_into(store, session)
        client = openai.AsyncOpenAI(
            base_url=session.base_url, api_key=session.secret, max_retries=0
        )
        async with client:
            frame = {"type": "image_url", "image_url": {"url": URL}}
            message: Any = {"role": "user", "content": [{"type": "text", "text": "look"}, frame]}
            await client.chat.completions.create(model="m", messages=[message])
        store.begin(Assignment("r1")).finish("completed", reward=1.0)
    async with ViewServer([tmp_path / "runs"]) as view:
        status, _, page = await asyncio.to_thread(_get, view.url + "b/b/r/r1")
        assert status == 200
        assert f'src="r1/artifacts/frames/{SHA}.png"'.encode() in page
        base = view.url + "b/b/r/r1/artifacts/frames/"
        status, headers, body = await asyncio.to_thread(_get, base + f"{SHA}.png")
        assert (status, body, headers["content-type"]) == (200, PNG, "image/png")
        # Only what SHA256SUMS lists is served, and never through a link.
        other = folder / "artifacts" / "frames" / ("0" * 64 + ".png")
        other.write_bytes(PNG)
        status, _, _ = await asyncio.to_thread(
            _get, view.url + f"b/b/r/r1/artifacts/frames/{other.name}"
        )
        assert status == 404
        kept = folder / "artifacts" / "frames" / f"{SHA}.png"
        kept.unlink()
        kept.symlink_to(other)
        status, _, body = await asyncio.to_thread(
            _get, view.url + f"b/b/r/r1/artifacts/frames/{SHA}.png"
        )
        assert status == 404 and body != PNG


def _get(url: str) -> tuple[int, dict[str, str], bytes]:
    parts = urlsplit(url)
    conn = http.client.HTTPConnection(parts.hostname or "", parts.port, timeout=30)
    try:
        conn.request("GET", parts.path)
        resp = conn.getresponse()
        return resp.status, {k.lower(): v for k, v in resp.getheaders()}, resp.read()
    finally:
        conn.close()
