"""Offline agents for the `web` example: a scripted stand-in for a computer-use model,
and Playwright over CDP.

`policy` reads the name and size from the prompt and answers as a model would with the
`computer_action` tool: one batch that clicks the name field (the page's layout is
known: `page/style.css`), types the name, clicks the size and Order; then, once the
next frame came back, `done`. `OfflineAgent` serves it from
`proctor.testing.FakeModelServer` with a `ComputerAgent` in front of it (set
`WEB_MODEL`, e.g. `openai/gpt-4.1`, for a real model). `PlaywrightAgent` needs no
model: it drives the same browser through the `cdp` capability with Playwright's
`connect_over_cdp`.
"""

from __future__ import annotations

import os
import re
from typing import TYPE_CHECKING, Any

from proctor.agents import ComputerAgent
from proctor.testing import FakeModelServer, FakeRequest, Reply

if TYPE_CHECKING:
    from proctor import Run

__all__ = ["OfflineAgent", "PlaywrightAgent", "policy"]

NAME = (240, 25)
SIZES = {"small": (120, 75), "large": (240, 75)}
ORDER = (160, 130)
_PROMPT = re.compile(r'order a (small|large) pizza for the name "([^"]*)"')


def _task(prompt: str) -> tuple[str, str]:
    """The name and size the prompt asks for."""
    found = _PROMPT.search(prompt)
    if found is None:
        raise ValueError(f"not an order prompt: {prompt[:80]!r}")
    return found[2], found[1]


def _click(point: tuple[int, int]) -> dict[str, Any]:
    return {"type": "click", "x": point[0], "y": point[1], "button": "left", "count": 1}


def policy(request: FakeRequest) -> Reply:
    """The first turn fills in the form and orders; the next one says done."""
    if any(m["role"] == "tool" for m in request.messages):
        return Reply.actions({"type": "done"})
    prompt = next(str(m["content"]) for m in request.messages if m["role"] == "user")
    name, size = _task(prompt)
    return Reply.actions(
        _click(NAME), {"type": "type", "text": name}, _click(SIZES[size]), _click(ORDER)
    )


class OfflineAgent:
    """A `ComputerAgent` on `policy`, served by a fake model server per rollout."""

    async def __call__(self, run: Run) -> None:
        model = os.environ.get("WEB_MODEL")
        if model:
            await ComputerAgent(model, max_actions=200)(run)
            return
        async with FakeModelServer(policy) as fake:
            await ComputerAgent(f"fake/web@{fake.url}", max_actions=50)(run)


class PlaywrightAgent:
    """Fill in the page with Playwright, connected over CDP to the rollout's browser
    (`run.binding("browser").url`, the tunnel's loopback endpoint)."""

    async def __call__(self, run: Run) -> None:
        from playwright.async_api import async_playwright

        name, size = _task(str(run.prompt))
        async with async_playwright() as p:
            browser = await p.chromium.connect_over_cdp(run.binding("browser").url)
            page = browser.contexts[0].pages[0]
            await page.fill("#name", name)
            await page.check(f"#size-{size}")
            await page.click("#submit")
            status = page.locator("#status")
            await status.filter(has_text="Ordered").wait_for(timeout=10_000)
            run.trace.content = await status.text_content()
            await browser.close()  # over CDP: disconnects, the browser stays the task's
        run.trace.add("assistant", run.trace.content)
