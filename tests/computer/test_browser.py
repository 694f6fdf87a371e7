"""The browser capability: Playwright over CDP and the computer/1 actions reach the same
chromium through the tunnel; nothing outlives the rollout; no other uid gets in."""

from __future__ import annotations

import asyncio
import json
import shutil
import signal
import sys
from pathlib import Path

import pytest
from _frames import pixel, processes_with
from playwright.async_api import async_playwright

from _support.waiting import until
from proctor import RemoteError, SandboxRuntime, SubprocessRuntime, Task
from proctor.agents import Run
from proctor.engine import rollout
from proctor.env import BrowserServer, DesktopClient

BROWSER_ENV = Path(__file__).with_name("browser_env.py")
GREEN = (0, 255, 0)
LIGHT = (275, 200)


def _runtime(kind: str) -> SandboxRuntime | SubprocessRuntime:
    if kind == "sandbox" and shutil.which("bwrap") is None:
        pytest.skip("bubblewrap is not installed (make sysdeps)")
    if kind == "sandbox":  # chromium reserves more address space than RLIMIT_AS allows
        return SandboxRuntime(BROWSER_ENV, limits={"memory": None})
    return SubprocessRuntime(BROWSER_ENV)


def _profile_marker(run: Run) -> str:
    """Something only this rollout's chromium has in its argv: its server's port."""
    assert run.client is not None and run.client.manifest is not None
    return next(b.url for b in run.client.manifest.bindings if b.name == "browser")


async def _with_playwright(run: Run, seen: dict[str, object]) -> None:
    prompt = json.loads(run.prompt)
    async with async_playwright() as p:
        browser = await p.chromium.connect_over_cdp(run.binding("browser").url)
        page = browser.contexts[0].pages[0]
        seen["url"] = page.url
        await page.fill("#name", prompt["text"])
        await page.click("#go")
        await page.wait_for_function(
            "getComputedStyle(light).backgroundColor != 'rgb(255, 255, 255)'"
        )
        await browser.close()
    run.answer = "done"


async def _with_actions(run: Run, seen: dict[str, object]) -> None:
    prompt = json.loads(run.prompt)
    async with DesktopClient(run.binding("browser").url) as client:
        assert (await client.info())["kind"] == "browser"
        seen["before"] = pixel(await client.screenshot(), *LIGHT)
        await client.act(
            [
                {"type": "click", "x": 60, "y": 25},
                {"type": "type", "text": prompt["text"]},
                {"type": "click", "x": 85, "y": 80},
            ],
            frame=False,
        )

        async def lit() -> bool:
            return pixel(await client.screenshot(), *LIGHT) == GREEN

        await until(lit, "the light to turn green", within=20)
        seen["after"] = pixel(await client.screenshot(), *LIGHT)
        with pytest.raises(RemoteError, match="unknown key 'Hyper_Q'"):
            await client.act([{"type": "key", "key": "Hyper_Q"}])
    run.answer = "done"


@pytest.mark.parametrize(
    ("how", "kind"),
    [("playwright", "subprocess"), ("actions", "subprocess"), ("actions", "sandbox")],
)
async def test_a_local_page_is_filled_in_and_submitted(kind: str, how: str) -> None:
    seen: dict[str, object] = {}
    agent = _with_playwright if how == "playwright" else _with_actions
    run = await rollout(
        Task(env="web-form", id="fill_page", args={"text": "hi there"}),
        lambda r: agent(r, seen),
        runtime=_runtime(kind),
    )
    assert run.error is None, run.error
    assert run.grade is not None and run.grade.info == {"clicks": 1, "text": "hi there"}
    assert run.reward == 1.0
    if how == "actions":
        assert (seen["before"], seen["after"]) == ((255, 255, 255), GREEN)
    else:
        assert str(seen["url"]).startswith("http://127.0.0.1:")


async def test_chromium_and_its_profile_go_with_the_server() -> None:
    async with BrowserServer(320, 200) as browser:
        assert browser._dir is not None
        profile = browser._dir
        assert processes_with(profile), "chromium is not running"
    assert processes_with(profile) == []
    assert not await asyncio.to_thread(Path(profile).exists)


async def test_pages_reach_only_loopback() -> None:
    async with BrowserServer(320, 200) as browser:
        with pytest.raises(Exception, match=r"ERR_PROXY_CONNECTION_FAILED|ERR_"):
            await browser.goto("http://192.0.2.1/")


SERVER = """
import asyncio
from proctor.env import BrowserServer

async def main():
    async with BrowserServer(320, 200) as browser:
        print(browser._dir, flush=True)
        await asyncio.sleep(3600)

asyncio.run(main())
"""


async def test_chromium_dies_with_a_server_killed_with_sigkill() -> None:
    server = await asyncio.create_subprocess_exec(
        sys.executable, "-c", SERVER, stdout=asyncio.subprocess.PIPE
    )
    try:
        assert server.stdout is not None
        profile = (await asyncio.wait_for(server.stdout.readline(), 60)).decode().strip()
        assert profile and processes_with(profile), "chromium is not running"
    finally:
        server.send_signal(signal.SIGKILL)
        await server.wait()
    await until(lambda: not processes_with(profile), "chromium to go", within=30)


async def test_a_second_playwright_client_sees_the_page_the_first_left() -> None:
    """The CDP bridge kept the first client's auto-attached sessions when it left, and
    chromium never announces a target twice on one pipe: the second client saw no page."""
    seen: list[int] = []

    async def twice(run: Run) -> None:
        for _ in range(2):
            async with async_playwright() as p:
                browser = await p.chromium.connect_over_cdp(run.binding("browser").url)
                seen.append(len(browser.contexts[0].pages) if browser.contexts else 0)
                await browser.close()
        run.answer = "done"

    run = await rollout(
        Task(env="web-form", id="fill_page", args={"text": "x"}),
        twice,
        runtime=_runtime("subprocess"),
    )
    assert run.error is None, run.error
    assert seen == [1, 1]
