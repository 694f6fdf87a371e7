"""Desktops and browsers under `ContainerRuntime`, in a `python_image(computer=True)`:
the Tk form is filled in through the action tunnel (the app's state and the next frame
agree), the local page through Playwright over CDP, on network "none", and no container
is left behind."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
from pathlib import Path
from typing import Any

import pytest
from _frames import pixel
from playwright.async_api import async_playwright

from _support.waiting import until
from proctor import Task
from proctor.agents import Agent, Run
from proctor.engine import rollout
from proctor.env import DesktopClient
from proctor.runtimes import ContainerRuntime, python_image

HERE = Path(__file__).resolve().parent
RUNC = "/usr/sbin/runc"  # crun fails on these hosts' cgroups; podman takes runc by path
GREEN = (0, 255, 0)
WHITE = (255, 255, 255)
LIGHT = (275, 200)

pytestmark = pytest.mark.skipif(shutil.which("podman") is None, reason="podman is not installed")


@pytest.fixture(scope="module")
def image() -> str:
    """The computer-use image: built once (~30 s), found by its content hash after."""
    return python_image(engine="podman", computer=True)


def _runtime(image: str, source: str) -> ContainerRuntime:
    """The environment file comes in read-only at its own path; network "none"."""
    options: dict[str, Any] = {"oci_runtime": RUNC} if os.path.exists(RUNC) else {}
    return ContainerRuntime(
        image, str(HERE / source), engine="podman", mounts=[f"{HERE}:{HERE}:ro"], **options
    )


def _left_behind(batch: str) -> list[str]:
    """The batch's containers; any found are removed, so a failed test leaves none."""
    argv = ["podman", "ps", "-a", "-q", f"--filter=label=proctor.batch={batch}"]
    found = subprocess.run(argv, capture_output=True, text=True, check=True).stdout.split()
    if found:
        subprocess.run(["podman", "rm", "-f", *found], capture_output=True, check=False)
    return found


async def _run(image: str, source: str, task: Task, agent: Agent) -> Run:
    runtime = _runtime(image, source)
    try:
        async with runtime:
            run = await rollout(task, agent, runtime=runtime)
    finally:
        left = _left_behind(runtime.batch)
    assert left == []  # the display, the app and the browser went with the container
    return run


async def test_a_tk_form_in_a_container_desktop_is_filled_in(image: str) -> None:
    seen: dict[str, object] = {}

    async def fill(run: Run) -> None:
        async with DesktopClient(run.binding("desktop").url) as client:
            seen["before"] = pixel(await client.screenshot(), *LIGHT)
            frame = await client.act(
                [
                    {"type": "click", "x": 60, "y": 25},
                    {"type": "type", "text": "Zürich 42"},
                    {"type": "click", "x": 85, "y": 80},
                ]
            )
            assert frame is not None and (frame.width, frame.height) == (640, 400)

            async def lit() -> bool:
                return pixel(await client.screenshot(), *LIGHT) == GREEN

            await until(lit, "the light to turn green", within=30)
            seen["after"] = pixel(await client.screenshot(), *LIGHT)
        run.answer = "done"

    task = Task(env="tk-form", id="fill_form", args={"text": "Zürich 42"})
    run = await _run(image, "tk_env.py", task, fill)
    assert run.error is None, run.error
    assert run.grade is not None and run.grade.info["text"] == "Zürich 42", run.grade
    assert run.grade.info["clicks"] == 1 and run.reward == 1.0
    assert (seen["before"], seen["after"]) == (WHITE, GREEN)


@pytest.mark.skipif(shutil.which("chromium") is None, reason="chromium is not installed")
async def test_a_local_page_in_a_container_browser_is_driven_over_cdp(image: str) -> None:
    seen: dict[str, object] = {}

    async def fill(run: Run) -> None:
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
        async with DesktopClient(run.binding("browser").url) as client:
            seen["after"] = pixel(await client.screenshot(), *LIGHT)
        run.answer = "done"

    task = Task(env="web-form", id="fill_page", args={"text": "hi there"})
    run = await _run(image, "browser_env.py", task, fill)
    assert run.error is None, run.error
    assert run.grade is not None and run.grade.info == {"clicks": 1, "text": "hi there"}
    assert run.reward == 1.0 and seen["after"] == GREEN
    assert str(seen["url"]).startswith("http://127.0.0.1:")  # its own loopback, no network


def test_a_missing_program_is_named(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # PATH holds only the engine: no Xvfb, no xkbcomp
    (tmp_path / "podman").symlink_to(str(shutil.which("podman")))
    monkeypatch.setenv("PATH", str(tmp_path))
    with pytest.raises(ValueError, match=r"missing on this machine: Xvfb, xkbcomp;.*make sysdeps"):
        python_image(engine="podman", computer=True)
