"""The rollout page in a real browser: the transcript in trace order, the time ruler,
artifacts, inline images, earlier attempts, other batches and the transcript diff.

Two batches hold the same rollout id: `tooled` ran a ToolAgent on FakeModelServer;
`crafted` was written with `BatchStore`/`RolloutRecorder` as a runner would (two
attempts, an image turn, an artifact).
"""

from __future__ import annotations

import asyncio
import base64
import hashlib
import struct
import zlib
from collections.abc import AsyncIterator
from pathlib import Path

import pytest
import pytest_asyncio
from playwright.async_api import Page, expect
from view_helpers import Assignment, add, page_true, proctor_view, write_batch_config

from proctor.batch import BatchStore, aexecute
from proctor.testing import FakeModelServer, Reply

pytestmark = pytest.mark.asyncio(loop_scope="session")

MODEL = "gpt-4.1-mini"
RID = "add-1-2--tool--r1"
ARTIFACT = b"artifact bytes \x00\x01\xff end\n"
NOT_AN_IMAGE = "data:text/html;base64,PHNjcmlwdD5hbGVydCgxKTwvc2NyaXB0Pg=="


def _png() -> bytes:
    """A valid 2x1 PNG (red, blue)."""

    def chunk(kind: bytes, data: bytes) -> bytes:
        body = kind + data
        return struct.pack(">I", len(data)) + body + struct.pack(">I", zlib.crc32(body))

    header = struct.pack(">IIBBBBB", 2, 1, 8, 2, 0, 0, 0)
    pixels = zlib.compress(b"\x00\xff\x00\x00\x00\x00\xff")
    return (
        b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", header) + chunk(b"IDAT", pixels) + chunk(b"IEND", b"")
    )


PNG_URL = "data:image/png;base64," + base64.b64encode(_png()).decode()


def _image_turn() -> dict[str, object]:
    content = [
        {"type": "text", "text": "here is the picture"},
        {"type": "image_url", "image_url": {"url": PNG_URL}},
        {"type": "image_url", "image_url": {"url": NOT_AN_IMAGE}},
    ]
    message = {"role": "assistant", "content": content, "reasoning_content": "think of red"}
    return {
        "turn": 1,
        "api": "chat",
        "model": "painter",
        "status": 200,
        "response": {"choices": [{"index": 0, "message": message}]},
        "usage": {"input_tokens": 5, "output_tokens": 6},
        "cost": 0.001,
        "attempts": [{"n": 1, "status": 429}, {"n": 2, "status": 200}],
    }


def _crafted(out: Path) -> None:
    """Attempt 1 failed (with a log), attempt 2 drew a picture and saved an artifact."""
    planned = Assignment(RID, "add-1-2", agent="tool")
    with BatchStore.create(out, {"name": "crafted", "config": None}) as store:
        store.add_assignments([planned])
        first = store.begin(planned, phase="agent")
        first.update(prompt="What is 1 + 2?")
        first.log("first attempt log\n")
        first.finish("failed", error={"phase": "agent", "type": "Boom", "message": "boom"})
        rec = store.begin(planned, attempt=2)
        rec.update(phase="agent", prompt="What is 1 + 2?")
        rec.append_turn(_image_turn())
        rec.add_artifact("result.txt", ARTIFACT)
        rec.update(phase="grading")
        grade = {"grade": {"reward": 0.0, "subscores": []}}
        rec.finish("completed", phase="done", answer="4", reward=0.0, result=grade)


@pytest_asyncio.fixture(scope="module", loop_scope="session")
async def outs(tmp_path_factory: pytest.TempPathFactory) -> AsyncIterator[Path]:
    """A folder holding both batches."""
    root = tmp_path_factory.mktemp("rollout-page")
    script: list[Reply | str] = [Reply.tool("lookup", key="sum"), "3"]
    async with FakeModelServer(script, models=(MODEL,)) as fake:
        agent = {"kind": "tool", "model": f"openai/{MODEL}@{fake.url}", "name": "tool"}
        config = write_batch_config(root / "work", "tooled", [add(1, 2)], agent=agent)
        result = await aexecute(config, root / "runs" / "tooled")
    assert result.counts == {"completed": 1}, result
    _crafted(root / "runs" / "crafted")
    yield root / "runs"


_KINDS = """() => [...document.querySelectorAll("#transcript > .item")]
  .map((e) => e.dataset.kind)
  .filter((k) => ["prompt", "turn", "tool-call", "tool-result", "answer", "grade"].includes(k))"""


async def test_the_transcript_is_interleaved_and_timed(
    page: Page, outs: Path, tmp_path: Path
) -> None:
    async with proctor_view(outs, log_dir=tmp_path) as view:
        await page.goto(view.at(f"/b/tooled/r/{RID}"))
        await expect(page.locator("#meta")).to_contain_text("completed")
        kinds = await page.evaluate(_KINDS)
        assert kinds == ["prompt", "turn", "tool-result", "turn", "answer", "grade"]
        turns = page.locator("#transcript div.turn")
        await expect(turns.nth(0).locator("div.tool-call")).to_contain_text("lookup")
        await expect(turns.nth(0).locator("ol.attempts li")).to_have_text("200")
        await expect(turns.nth(0).locator("p.usage")).to_contain_text("tokens in 31")
        await expect(turns.nth(1).locator(".message")).to_contain_text("3")
        await expect(page.locator("#prompt")).to_contain_text("What is 1 + 2?")

        ruler = page.locator("svg#ruler")
        for phase in ("provisioning", "agent", "grading", "teardown"):
            await expect(ruler.locator(f'rect.phase[data-phase="{phase}"]')).to_have_count(1)
        await expect(ruler.locator('rect.bar[data-kind="turn"]')).to_have_count(2)
        await expect(ruler.locator('rect.bar[data-kind="tool_result"]')).to_have_count(1)
        await expect(page.locator('a.other-batch[data-batch="crafted"]')).to_have_attribute(
            "href", f"/b/crafted/r/{RID}"
        )
        await page.locator("#ruler").scroll_into_view_if_needed()


async def test_artifacts_images_and_earlier_attempts(
    page: Page, outs: Path, tmp_path: Path
) -> None:
    async with proctor_view(outs, log_dir=tmp_path) as view:
        await page.goto(view.at(f"/b/crafted/r/{RID}"))
        turn = page.locator("#transcript div.turn")
        await expect(turn).to_have_count(1)
        await expect(turn.locator(".reasoning")).to_contain_text("think of red")
        await expect(turn.locator("ol.attempts li")).to_have_text(["429", "200"])
        image = turn.locator("img.inline-image")
        await expect(image).to_have_count(1)
        await expect(image).to_have_attribute("src", PNG_URL)
        await page_true(
            page,
            "document.querySelector('img.inline-image').complete"
            " && document.querySelector('img.inline-image').naturalWidth === 2",
        )
        await expect(turn.locator("pre.text", has_text=NOT_AN_IMAGE)).to_have_count(1)
        await expect(page.locator("#ruler rect.phase")).not_to_have_count(0)

        row = page.locator('#artifacts tr[data-artifact="result.txt"]')
        await expect(row.locator("td.size")).to_have_text(str(len(ARTIFACT)))
        await expect(row.locator("code.sha256")).to_have_text(hashlib.sha256(ARTIFACT).hexdigest())
        async with page.expect_download() as info:
            await row.locator("a.artifact-link").click()
        download = await info.value
        assert download.suggested_filename == "result.txt"
        assert await asyncio.to_thread(Path(await download.path()).read_bytes) == ARTIFACT
        await _artifact_headers(page, view.at(f"/b/crafted/r/{RID}/artifacts/"))

        await page.locator('a.attempt-link[href="?attempt=1"]').click()
        await expect(page.locator("#viewing-attempt")).to_contain_text("earlier attempt")
        await expect(page.locator("#meta .status")).to_have_text("failed")
        await expect(page.locator("#log")).to_contain_text("first attempt log")
        await expect(page.locator("#error")).to_contain_text("boom")
        missing = await page.request.get(view.at(f"/b/crafted/r/{RID}?attempt=7"))
        assert missing.status == 404


async def _artifact_headers(page: Page, base: str) -> None:
    """One listed name downloads as an attachment; anything else is 404."""
    ok = await page.request.get(base + "result.txt")
    assert ok.status == 200
    assert ok.headers["content-disposition"].startswith("attachment;")
    assert ok.headers["x-content-type-options"] == "nosniff"
    assert await ok.body() == ARTIFACT
    for name in ("SHA256SUMS", "nope.txt", "..%2F..%2Fbatch.json", "%2E%2E%2Frollout.json"):
        assert (await page.request.get(base + name)).status == 404, name


async def test_the_diff_of_one_rollout_in_two_batches(
    page: Page, outs: Path, tmp_path: Path
) -> None:
    async with proctor_view(outs, log_dir=tmp_path) as view:
        await page.goto(view.at(f"/b/tooled/r/{RID}"))
        await page.locator("a.diff-link").click()
        await expect(page.locator("body")).to_have_attribute("data-page", "diff")
        removed, added = page.locator("tr.removed del"), page.locator("tr.added ins")
        await expect(removed.filter(has_text="lookup")).not_to_have_count(0)
        await expect(removed.filter(has_text="reward 1.0")).to_have_count(1)
        await expect(added.filter(has_text="here is the picture")).to_have_count(1)
        await expect(added.filter(has_text="reward 0.0")).to_have_count(1)
        await expect(page.locator("tr.same").filter(has_text="What is 1 + 2?")).to_have_count(1)
        bad = await page.request.get(view.at("/diff?a=tooled/nope&b=crafted/" + RID))
        assert bad.status == 404
        assert await page.evaluate("document.querySelectorAll('script:not([src])').length") == 0
