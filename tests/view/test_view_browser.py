"""The dashboard in a real browser: `proctor view` as a child, headless Chromium on its pages.

Each test builds real output directories (executed batches, or a hostile record written
with the store), starts the server on them, and drives the pages the way a user does.
"""

from __future__ import annotations

import asyncio
import re
from collections.abc import Callable
from pathlib import Path

import pytest
from playwright.async_api import Page, Response, expect
from view_helpers import (
    BROKEN,
    HOSTILE_IMG,
    HOSTILE_LINK,
    HOSTILE_SCRIPT,
    LONG_LINE,
    add,
    batch_child,
    hostile_batch,
    page_true,
    proctor_view,
    run_batch,
    score,
    write_batch_config,
)

from _support.waiting import until
from proctor.batch import aexecute, list_rollouts
from proctor.testing import FakeModelServer, Reply

pytestmark = pytest.mark.asyncio(loop_scope="session")

MODEL = "gpt-4.1-mini"


async def test_the_batches_page_lists_every_batch_under_a_folder(
    page: Page, tmp_path: Path
) -> None:
    runs = tmp_path / "runs"
    await run_batch(tmp_path / "a", runs / "alpha", [add(1, 2), add(3, 4)])
    await run_batch(tmp_path / "b", runs / "beta", [add(1, 2), BROKEN])
    async with proctor_view(runs, log_dir=tmp_path) as view:
        await page.goto(view.url)
        rows = page.locator("table#batches tbody tr[data-batch]")
        await expect(rows).to_have_count(2)
        alpha = page.locator('tr[data-batch="alpha"]')
        beta = page.locator('tr[data-batch="beta"]')
        await expect(alpha.locator("td.counts")).to_have_text(re.compile(r"^\s*completed 2\s*$"))
        await expect(beta.locator("td.counts")).to_contain_text("completed 1")
        await expect(beta.locator("td.counts")).to_contain_text("failed 1")
        await expect(alpha.locator("td.mean-reward")).to_contain_text("1")
        for cell in ("td.cost", "td.started"):
            await expect(alpha.locator(cell)).to_have_count(1)
        await expect(alpha.locator("a.batch-link")).to_have_attribute("href", "/b/alpha")
        await beta.locator("a.batch-link").click()
        await expect(page).to_have_url(view.at("/b/beta"))
        await expect(page.locator("#counts")).to_contain_text("failed 1")


async def test_the_batches_page_updates_live_while_a_batch_runs(page: Page, tmp_path: Path) -> None:
    work, out = tmp_path / "work", tmp_path / "live"
    waiter = {"kind": "python", "agent": "agents.py:waiter"}
    config = write_batch_config(work, "live", [add(1, 2), add(3, 4)], agent=waiter)
    async with batch_child(config, out, log_dir=tmp_path) as batch:
        await until(lambda: len(list(work.glob("started-*"))) == 2, "both rollouts running", 60)
        async with proctor_view(out, log_dir=tmp_path) as view:
            navigations: list[str] = []
            page.on("framenavigated", lambda frame: navigations.append(frame.url))
            async with page.expect_request(view.at("/events")):
                await page.goto(view.url)
            counts = page.locator('tr[data-batch="live"] td.counts')
            await expect(counts).to_contain_text("running 2")
            await page_true(page, "Number(document.body.dataset.updates) >= 1")  # state
            before = await page.evaluate("Number(document.body.dataset.updates)")
            await page.evaluate("window.__same_document = true")
            navigations.clear()

            (work / "gate").write_text("open")
            await expect(counts).to_have_text(re.compile(r"^\s*completed 2\s*$"), timeout=30_000)
            assert await asyncio.wait_for(batch.wait(), timeout=30) == 0
            updates = await page.evaluate("Number(document.body.dataset.updates)")
            assert updates > before
            assert await page.evaluate("window.__same_document") is True  # no reload
            assert navigations == []


def _rollouts_call(path: str, **params: str) -> Callable[[Response], bool]:
    """A predicate for `expect_response`: the rollouts API asked with these parameters."""

    def matches(response: Response) -> bool:
        url = response.url
        return f"/api/b/{path}/rollouts" in url and all(
            re.search(rf"[?&]{key}={re.escape(value)}(&|$)", url) for key, value in params.items()
        )

    return matches


async def _expect_ids(page: Page, ids: list[str]) -> None:
    rows = page.locator("table#rollouts tbody tr[data-rollout]")
    await expect(rows).to_have_count(len(ids))
    for n, rollout_id in enumerate(ids):
        await expect(rows.nth(n)).to_have_attribute("data-rollout", rollout_id)
    await expect(page.locator("body")).to_have_attribute("data-loaded", str(len(ids)))


async def test_the_batch_page_filters_and_sorts_its_rollouts(page: Page, tmp_path: Path) -> None:
    rows = [score("low", 0.2), score("high", 0.9), score("mid", 0.5), BROKEN]
    out = await run_batch(tmp_path / "work", tmp_path / "mixed", rows)
    ids = {row["task"]: row["id"] for row in list_rollouts(out)}
    async with proctor_view(out, log_dir=tmp_path) as view:
        await page.goto(view.at("/b/mixed"))
        await expect(page.locator("#counts")).to_contain_text("completed 3")
        await expect(page.locator("svg#reward-hist")).to_have_count(1)
        await expect(page.locator('#errors-by-phase li[data-phase="grading"]')).to_contain_text(
            "grading: 1"
        )
        cells = page.locator('table#model-task tr[data-task="high"] td')
        await expect(cells).to_have_count(1)
        await expect(cells).to_contain_text("0.900 (1/1)")
        await _expect_ids(page, [ids[t] for t in ("low", "high", "mid", "broken")])

        form = page.locator("form#filters")
        async with page.expect_response(_rollouts_call("mixed", status="failed")):
            await form.locator('[name="status"]').select_option("failed")
        await _expect_ids(page, [ids["broken"]])
        async with page.expect_response(_rollouts_call("mixed")):
            await form.locator('[name="status"]').select_option("")
        await _expect_ids(page, [ids[t] for t in ("low", "high", "mid", "broken")])

        q = form.locator('[name="q"]')
        async with page.expect_response(_rollouts_call("mixed", q="hig")):
            await q.fill("hig")
            await q.dispatch_event("change")
        await _expect_ids(page, [ids["high"]])
        async with page.expect_response(_rollouts_call("mixed")):
            await q.fill("")
            await q.dispatch_event("change")
        await _expect_ids(page, [ids[t] for t in ("low", "high", "mid", "broken")])

        await _sort_by_reward_descending(page)
        await _expect_ids(page, [ids[t] for t in ("high", "mid", "low", "broken")])


async def _sort_by_reward_descending(page: Page) -> None:
    """Click the reward header until the table asks for descending order (it toggles)."""
    header = page.locator('table#rollouts thead th[data-sort="reward"]')
    for _ in range(2):
        async with page.expect_response(_rollouts_call("mixed", order_by="reward")) as info:
            await header.click()
        if re.search(r"[?&]desc=1(&|$)", (await info.value).url):
            return
    raise AssertionError("two clicks on the reward header never sorted descending")


async def test_a_rollout_page_shows_its_turns_tool_calls_and_results(
    page: Page, tmp_path: Path
) -> None:
    script: list[Reply | str] = [Reply.tool("lookup", key="sum"), "3"]
    async with FakeModelServer(script, models=(MODEL,)) as fake:
        agent = {"kind": "tool", "model": f"openai/{MODEL}@{fake.url}", "name": "tool"}
        config = write_batch_config(tmp_path / "work", "tooled", [add(1, 2)], agent=agent)
        result = await aexecute(config, tmp_path / "tooled")
    assert result.counts == {"completed": 1}, result
    async with proctor_view(tmp_path / "tooled", log_dir=tmp_path) as view:
        await page.goto(view.at("/b/tooled"))
        link = page.locator('tr[data-rollout="add-1-2--tool--r1"] a.rollout-link')
        await expect(link).to_have_attribute("href", "/b/tooled/r/add-1-2--tool--r1")
        await link.click()
        await expect(page).to_have_url(view.at("/b/tooled/r/add-1-2--tool--r1"))
        await expect(page.locator("#meta")).to_contain_text("completed")
        await expect(page.locator("#prompt")).to_contain_text("What is 1 + 2?")
        turns = page.locator("div.turn")
        await expect(turns).to_have_count(2)
        call = turns.nth(0).locator("div.tool-call")
        await expect(call).to_contain_text("lookup")
        await expect(call).to_contain_text("sum")
        await expect(turns.nth(0).locator("ol.attempts")).to_contain_text("200")
        await expect(turns.nth(1)).to_contain_text("3")
        await expect(page.locator("div.tool-result")).to_have_count(1)
        await expect(page.locator("div.tool-result")).to_contain_text("lookup")
        await expect(page.locator("#answer")).to_contain_text("3")
        await expect(page.locator("#grade")).to_contain_text("1")


async def test_a_hostile_transcript_renders_as_inert_text(page: Page, tmp_path: Path) -> None:
    rollout_id = hostile_batch(tmp_path / "evil")
    async with proctor_view(tmp_path / "evil", log_dir=tmp_path) as view:
        dialogs: list[str] = []
        page.on("dialog", lambda dialog: dialogs.append(dialog.message))
        await page.goto(view.at(f"/b/evil/r/{rollout_id}"))
        await page.wait_for_load_state("load")
        for where in ("#prompt", "#answer", "#error", "#log", "div.tool-result"):
            await expect(page.locator(where).first).to_contain_text(HOSTILE_SCRIPT)
        for text in (HOSTILE_IMG, HOSTILE_LINK, "red alert"):
            await expect(page.locator("#prompt")).to_contain_text(text)
        await expect(page.locator("#error pre.traceback")).to_contain_text(HOSTILE_IMG)
        await expect(page.locator("div.turn").first).to_contain_text(HOSTILE_SCRIPT)
        await expect(page.locator("#log")).to_contain_text("\ufffd")  # invalid UTF-8
        await expect(page.locator("#log")).to_contain_text(LONG_LINE[:1000])

        assert await page.evaluate("typeof window.__pwned") == "undefined"
        assert dialogs == []
        assert await page.evaluate(_INJECTED) == {"scripts": 0, "images": 0, "js_links": 0}
        # the 100 KB line wraps or scrolls inside its box: the page itself does not widen
        assert await page.evaluate(
            "document.documentElement.scrollWidth <= window.innerWidth + 1"
        ), "a long line widened the page"


_INJECTED = """() => ({
  scripts: [...document.querySelectorAll("script")]
    .filter((s) => s.textContent.includes("__pwned")).length,
  images: document.querySelectorAll('img[src="x"], [onerror]').length,
  js_links: [...document.querySelectorAll("[href], [src], [action]")]
    .filter((e) => /^\\s*javascript:/i.test(e.getAttribute("href") || e.getAttribute("src")
      || e.getAttribute("action") || "")).length,
})"""
