"""Samples of a harness that sent images: frame references kept, or inlined on export."""

from __future__ import annotations

import base64
import hashlib
import json
from dataclasses import dataclass
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import openai
import pytest

from _support.images import png_bytes
from proctor.batch import BatchStore
from proctor.batch._recording import Recording
from proctor.batch._tally import Tally
from proctor.cli import main
from proctor.proxy import InterceptionProxy, Upstream
from proctor.samples import samples_from_batch
from proctor.testing import FakeModelServer

PNG = png_bytes(2000, seed=3)
B64 = base64.b64encode(PNG).decode()
SHA = hashlib.sha256(PNG).hexdigest()
REF = {"type": "image", "media_type": "image/png", "path": f"frames/{SHA}.png", "sha256": SHA}


@dataclass(frozen=True)
class Assignment:
    rollout_id: str
    task: str = "t"
    agent: str | None = "harness"
    model: str | None = "m"
    repeat: int = 0


@pytest.fixture
async def batch(fake: FakeModelServer, tmp_path: Path) -> Path:
    """A batch of one graded rollout whose harness sent a frame in each of 3 turns."""
    out = tmp_path / "out"
    async with InterceptionProxy(Upstream(fake.url, api_key="sk-up")) as proxy:
        with BatchStore.create(out, {}) as store:
            rec = store.begin(Assignment("r1"))
            session = proxy.open_session("r1")
            run = SimpleNamespace(proxy_session=session, client=None, prompt="p")
            Recording(run, rec, Tally(1))._entered_agent(run)  # type: ignore[arg-type]
            client = openai.AsyncOpenAI(
                base_url=session.base_url, api_key=session.secret, max_retries=0
            )
            messages: list[Any] = []
            async with client:
                for i in range(3):
                    url = f"data:image/png;base64,{B64}"
                    text = {"type": "text", "text": f"t{i}"}
                    image = {"type": "image_url", "image_url": {"url": url}}
                    messages.append({"role": "user", "content": [text, image]})
                    out_ = await client.chat.completions.create(model="m", messages=messages)
                    messages.append(out_.choices[0].message.model_dump(exclude_none=True))
            rec.finish("completed", reward=1.0)
    return out


async def test_samples_keep_references_or_inline_them(batch: Path) -> None:
    [sample] = list(samples_from_batch(batch))
    images = [p for m in sample.prompt + sample.completion for p in _parts(m) if "type" in p]
    assert [p for p in images if p.get("type") == "image"] == [REF] * 3
    [inlined] = list(samples_from_batch(batch, inline=True))
    images = [p for m in inlined.prompt + inlined.completion for p in _parts(m)]
    data = {k: v for k, v in REF.items() if k != "path"} | {"data": B64}
    assert [p for p in images if p.get("type") == "image"] == [data] * 3


async def test_export_inlines_frames_and_names_a_damaged_one(
    batch: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    target = tmp_path / "s.jsonl"
    assert main(["export", str(batch), "--inline-frames", "-o", str(target)]) == 0
    assert B64 in target.read_text() and "frames/" not in target.read_text()
    assert main(["export", str(batch), "-o", str(target)]) == 0
    line = json.loads(target.read_text())
    assert B64 not in target.read_text() and REF in line["prompt"][0]["content"]
    frame = batch / "rollouts" / "r1" / "artifacts" / "frames" / f"{SHA}.png"
    frame.write_bytes(b"not the frame")
    capsys.readouterr()
    assert main(["export", str(batch), "--inline-frames", "-o", str(target)]) == 1
    assert capsys.readouterr().err == f"error: {frame}: the frame's bytes are not its digest\n"


def _parts(message: Any) -> list[Any]:
    content = message.get("content") if isinstance(message, dict) else None
    return [p for p in content if isinstance(p, dict)] if isinstance(content, list) else []
