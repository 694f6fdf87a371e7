"""`graders.judge` with images: the final frame of a real desktop, or a rendered artifact,
compared with a reference image by a model behind a real interception proxy.

The fake model stands for a vision model: it decodes the two image parts it is sent
and scores 1 when the result's pixel matches the reference's, else 0. So a score says
the images reached the model intact, in the order the judge promises.
"""

from __future__ import annotations

import asyncio
import base64
import io
import sys
from collections.abc import AsyncGenerator, AsyncIterator
from pathlib import Path
from typing import Any

import pytest
from PIL import Image

from proctor import Environment, Task, rollout
from proctor.agents import Run
from proctor.env import DesktopClient, Frame, graders
from proctor.env._judge import Judge
from proctor.models import ImagePart
from proctor.proxy import InterceptionProxy, Upstream
from proctor.records import Trace
from proctor.runtimes import LocalRuntime
from proctor.testing import FakeModelServer, FakeRequest, Reply

GREEN = (0, 255, 0)
W, H = 320, 200
POINT = (50, 50)
RUBRIC = "Full marks when the result looks like the reference."
APP = (
    "import sys, tkinter as tk\n"
    "root = tk.Tk(); root.geometry('320x200+0+0'); root.configure(background=sys.argv[1])\n"
    "root.mainloop()\n"
)


def _png(colour: tuple[int, int, int], size: tuple[int, int] = (W, H)) -> bytes:
    out = io.BytesIO()
    Image.new("RGB", size, colour).save(out, "PNG")
    return out.getvalue()


def _pixel(url: str) -> tuple[int, int, int]:
    data = base64.b64decode(url.partition(";base64,")[2])
    r, g, b = Image.open(io.BytesIO(data)).convert("RGB").getpixel(POINT)  # type: ignore[misc]
    return r, g, b


def _vision(request: FakeRequest) -> Reply:
    """Score 1 when the result image's pixel is the reference image's, else 0."""
    content = request.json["messages"][-1]["content"]
    urls = [p["image_url"]["url"] for p in content if p.get("type") == "image_url"]
    texts = [p["text"] for p in content if p.get("type") == "text"]
    assert [t.split("\n")[0] for t in texts[1:]] == ["## Reference image", "## Result image"]
    reference, result = urls
    return Reply(f"Compared.\nscore: {int(_pixel(reference) == _pixel(result))}")


@pytest.fixture
async def vision() -> AsyncIterator[FakeModelServer]:
    async with FakeModelServer(_vision) as server:
        yield server


@pytest.fixture
async def proxy(vision: FakeModelServer) -> AsyncIterator[InterceptionProxy]:
    async with InterceptionProxy(Upstream(vision.url, api_key="sk-upstream")) as p:
        yield p


@pytest.fixture
def judge(proxy: InterceptionProxy) -> Judge:
    session = proxy.open_session("grading", trace=Trace("grading"))
    return Judge(session.base_url, session.secret)


async def test_a_rendered_artifact_is_judged_against_a_reference_image(
    vision: FakeModelServer, judge: Judge, tmp_path: Path
) -> None:
    rendered = tmp_path / "chart.png"
    rendered.write_bytes(_png(GREEN))

    async def artifact(run: Any) -> Path:  # a function of the run, here async
        return rendered

    reward = graders.judge("gpt-4.1-mini", RUBRIC, image=artifact, reference=_png(GREEN))
    assert await reward(prompt="Draw it.", answer="done", task=None, judge=judge) == 1.0
    images = vision.requests[-1].images
    assert [(i.where, i.media_type) for i in images] == [("user", "image/png")] * 2
    # A reference from the task, and a different result: the model sees they differ.
    rendered.write_bytes(_png((255, 0, 0)))
    by_task = graders.judge("m", RUBRIC, image=artifact, reference=lambda task: task["ref"])
    task = {"ref": _png(GREEN)}
    assert await by_task(prompt="p", answer="a", task=task, judge=judge) == 0.0


async def test_images_that_are_not_images_are_refused_naming_which(judge: Judge) -> None:
    bad = graders.judge("m", RUBRIC, reference=b"GIF? no: plain text")
    with pytest.raises(ValueError, match="reference: not a PNG, JPEG, GIF or WebP"):
        await bad(prompt="p", answer="a", task=None, judge=judge)
    encoded = base64.b64encode(_png(GREEN)).decode()
    lying = {"type": "image", "media_type": "image/jpeg", "data": encoded}
    with pytest.raises(ValueError, match=r"reference: not a .* \(image/jpeg\)"):
        await graders.judge("m", RUBRIC, reference=lying)(
            prompt="p", answer="a", task=None, judge=judge
        )
    missing = graders.judge("m", RUBRIC, image="desktop")
    with pytest.raises(RuntimeError, match="image='desktop' names no desktop or browser"):
        await missing(prompt="p", answer="a", task=None, judge=judge, run=None)
    with pytest.raises(TypeError, match="capability name or a function"):
        graders.judge("m", RUBRIC, image=b"not a name")  # type: ignore[arg-type]


def _desktop_env() -> Environment:
    env = Environment("painted")
    desktop = env.add_desktop(320, 200)

    @env.template
    async def paint(colour: str) -> AsyncGenerator[str, str]:
        await desktop.launch([sys.executable, "-c", APP, colour])
        yield "Wait for the window."

    env.reward(weight=1.0)(
        graders.judge("gpt-4.1-mini", RUBRIC, image="desktop", reference=_png(GREEN))
    )
    return env


async def _until_painted(run: Run) -> None:
    """The agent: wait until the app's window shows (the screen is black before)."""
    async with DesktopClient(run.binding("desktop").url) as client:
        async with asyncio.timeout(30):
            while True:
                frame = await client.screenshot()
                image = Image.open(io.BytesIO(frame.data)).convert("RGB")
                if image.getpixel(POINT) != (0, 0, 0):
                    run.answer = "painted"
                    return
                await asyncio.sleep(0.05)


@pytest.mark.parametrize(("colour", "reward"), [("#00ff00", 1.0), ("#ff0000", 0.0)])
async def test_the_final_frame_of_a_desktop_is_judged_against_the_reference(
    vision: FakeModelServer, proxy: InterceptionProxy, colour: str, reward: float
) -> None:
    async with LocalRuntime(_desktop_env()) as runtime:
        run = await rollout(
            Task(env="painted", id="paint", args={"colour": colour}),
            _until_painted,
            runtime=runtime,
            judge=proxy,
        )
    assert run.status == "completed" and not run.evaluation_failed, (run.error, run.grade)
    assert run.reward == reward
    (asked,) = vision.requests
    assert [i.media_type for i in asked.images] == ["image/png", "image/png"]
    judged = [s for s in run.trace.steps if s.kind == "model_turn"]
    assert len(judged) == 1 and judged[0].data is not None and judged[0].data["judge"] is True


async def test_an_image_part_and_a_frame_are_images_too(vision: FakeModelServer, judge: Judge):
    part = ImagePart("image/png", data=_png(GREEN))
    frame = Frame(_png(GREEN), "png", W, H, (0, 0))
    reward = graders.judge("m", RUBRIC, image=lambda run: frame, reference=part)
    assert await reward(prompt="p", answer="a", task=None, judge=judge) == 1.0
    assert [i.media_type for i in vision.requests[-1].images] == ["image/png"] * 2
