"""The rollout page's filmstrip and live frame, in a real browser on `proctor view`.

The batches are written with `BatchStore` and `RolloutRecorder` the way a runner's proxy
writes them: frames kept by digest (`add_frame`), model turns whose `context.new`
refers to them, and responses in the three wire formats carrying the normalized
`computer_action` call, Anthropic's native `computer` tool and OpenAI's `computer_call`.
Every recorded string a page shows is hostile.
"""

from __future__ import annotations

import hashlib
import io
import json
from pathlib import Path
from typing import Any

import pytest
from PIL import Image
from playwright.async_api import Page, expect
from view_helpers import HOSTILE, HOSTILE_SCRIPT, Assignment, proctor_view

from proctor.batch import BatchStore, aexecute, list_rollouts
from proctor.testing import FakeModelServer, Reply

pytestmark = pytest.mark.asyncio(loop_scope="session")

W, H = 320, 200


def _png(colour: tuple[int, int, int]) -> tuple[str, bytes]:
    out = io.BytesIO()
    Image.new("RGB", (W, H), colour).save(out, "PNG")
    data = out.getvalue()
    return f"frames/{hashlib.sha256(data).hexdigest()}.png", data


def _ref(name: str) -> dict[str, Any]:
    return {"type": "image", "media_type": "image/png", "path": name, "sha256": name[7:71]}


def _chat(actions: list[dict[str, Any]]) -> dict[str, Any]:
    call = {
        "id": "call_1",
        "type": "function",
        "function": {"name": "computer_action", "arguments": json.dumps({"actions": actions})},
    }
    message = {"role": "assistant", "content": None, "tool_calls": [call]}
    return {"choices": [{"index": 0, "message": message, "finish_reason": "tool_calls"}]}


def _line(turn: int, new: list[Any], response: dict[str, Any], api: str) -> dict[str, Any]:
    return {
        "turn": turn,
        "api": api,
        "model": "vision-model",
        "status": 200,
        "response": response,
        "usage": {"input_tokens": 1, "output_tokens": 1},
        "cost": 0.0,
        "attempts": [{"n": 1, "cause": "ok", "status": 200, "error": None}],
        "request_sha256": f"{turn:064d}",
        "messages": len(new),
        "context": {"kept": 0, "new": new},
    }


def _recorded_batch(out: Path) -> tuple[str, list[str]]:
    """A completed rollout of three turns, one per wire format; its id and frames."""
    reference, first, second, third = (
        _png(c) for c in ((0, 0, 255), (255, 255, 255), (200, 200, 200), (0, 255, 0))
    )
    planned = Assignment("desk--evil--r1", "desk")
    with BatchStore.create(out, {"name": "frames", "config": None}) as store:
        store.add_assignments([planned])
        rec = store.begin(planned, phase="agent")
        rec.update(prompt="Fill the form")
        for name, data in (reference, first, second, third):
            rec.add_frame(name, data)
        opening = {
            "role": "user",
            "content": [
                {"type": "text", "text": "Fill the form"},
                {**_ref(reference[0]), "reference": True},
                _ref(first[0]),
            ],
        }
        normalized: list[dict[str, Any]] = [
            {"type": "click", "x": 60, "y": 25, "button": "left", "count": 1},
            {"type": "drag", "path": [[10, 150], [100, 160], [200, 190]], "button": "left"},
            {"type": "type", "text": HOSTILE},
        ]
        rec.append_turn(_line(1, [opening], _chat(normalized), "chat"))
        native = {
            "content": [
                {
                    "type": "tool_use",
                    "id": "toolu_1",
                    "name": "computer",
                    "input": {"action": "right_click", "coordinate": [300, 12]},
                }
            ]
        }
        result = {"role": "tool", "tool_call_id": "call_1", "content": [_ref(second[0])]}
        rec.append_turn(_line(2, [result], native, "messages"))
        openai = {
            "output": [
                {
                    "type": "computer_call",
                    "call_id": "cc_1",
                    "action": {
                        "type": "scroll",
                        "x": 150,
                        "y": 100,
                        "scroll_x": 0,
                        "scroll_y": 300,
                    },
                }
            ]
        }
        shot = {"type": "computer_call_output", "call_id": "cc_0", "output": _ref(third[0])}
        rec.append_turn(_line(3, [shot], openai, "responses"))
        rec.finish("completed", answer="done", reward=1.0)
    return planned.rollout_id, [first[0], second[0], third[0]]


async def test_the_filmstrip_shows_each_turns_frame_with_its_actions_drawn(
    page: Page, tmp_path: Path
) -> None:
    out = tmp_path / "frames"
    rid, frames = _recorded_batch(out)
    async with proctor_view(out, log_dir=tmp_path) as view:
        await page.goto(view.at(f"/b/frames/r/{rid}"))
        cells = page.locator("#filmstrip figure.frame")
        await expect(cells).to_have_count(3)
        for n, (cell, name) in enumerate(zip(await cells.all(), frames, strict=True)):
            await expect(cell).to_have_attribute("data-turn", str(n + 1))
            await expect(cell).to_have_attribute("data-frame", name)
            image = cell.locator("a.frame-open svg image")
            await expect(image).to_have_attribute("href", f"/b/frames/r/{rid}/artifacts/{name}")
        # The frames load (the artifact route serves them inline as PNG).
        loaded = await page.evaluate(
            "Promise.all([...document.querySelectorAll('#filmstrip a.frame-open svg image')]"
            ".map(i => fetch(i.getAttribute('href')).then(r => r.headers.get('content-type'))))"
        )
        assert loaded == ["image/png"] * 3
        first, second, third = await cells.all()
        # Turn 1 (computer_action): the click as a marker where it landed, the drag path,
        # the typed text as a note, escaped.
        click = first.locator("a.frame-open g.mark-click")
        await expect(click).to_have_count(1)
        await expect(click).to_have_attribute("data-x", "60")
        await expect(click).to_have_attribute("data-y", "25")
        await expect(click.locator("circle")).to_have_attribute("cx", "60.0")
        drag = first.locator("a.frame-open g.mark-drag polyline")
        await expect(drag).to_have_attribute("points", "10.0,150.0 100.0,160.0 200.0,190.0")
        await expect(first.locator("figcaption .note")).to_contain_text(HOSTILE_SCRIPT)
        # Turn 2 (Anthropic's native tool) and turn 3 (OpenAI's computer_call).
        right = second.locator("a.frame-open g.mark-click")
        await expect(right).to_have_attribute("data-x", "300")
        await expect(right.locator("title")).to_contain_text("right click")
        scroll = third.locator("a.frame-open g.mark-scroll")
        await expect(scroll).to_have_attribute("data-y", "100")
        await expect(scroll.locator("title")).to_contain_text("scroll dx 0 dy 300")
        # The marker is drawn where the click was: at (60, 25) of the 320x200 frame.
        box = await first.locator("a.frame-open svg").bounding_box()
        dot = await click.locator("circle").bounding_box()
        assert box is not None and dot is not None
        centre = (dot["x"] + dot["width"] / 2, dot["y"] + dot["height"] / 2)
        scale = box["width"] / W
        assert abs(centre[0] - (box["x"] + 60 * scale)) < 3
        assert abs(centre[1] - (box["y"] + 25 * scale)) < 3
        # Each frame links to its turn; a click opens the large view, and closes it.
        await expect(second.locator("figcaption a.turn-link")).to_have_attribute("href", "#turn-2")
        await expect(page.locator("#turn-2")).to_have_count(1)
        large = page.locator("#frame-1")
        await expect(large).to_be_hidden()
        await second.locator("a.frame-open").click()
        await expect(large).to_be_visible()
        await expect(large.locator("g.mark-click")).to_have_count(1)
        large_box = await large.locator("svg").bounding_box()
        assert large_box is not None and large_box["width"] > box["width"]
        await large.locator("a.frame-close").click()
        await expect(large).to_be_hidden()
        # Nothing recorded ran as markup.
        assert await page.evaluate("window.__pwned") is None
        assert await page.locator("#filmstrip script, #filmstrip img[onerror]").count() == 0
        # An ended rollout has no live frame.
        await expect(page.locator("#live-frame")).to_have_count(0)


async def test_a_running_rollouts_page_shows_its_newest_frame_as_it_comes(
    page: Page, tmp_path: Path
) -> None:
    out = tmp_path / "live"
    planned = Assignment("desk--live--r1", "desk")
    with BatchStore.create(out, {"name": "live", "config": None}) as store:
        store.add_assignments([planned])
        rec = store.begin(planned, phase="agent")
        async with proctor_view(out, log_dir=tmp_path) as view:
            await page.goto(view.at(f"/b/live/r/{planned.rollout_id}"))
            live = page.locator("#live-frame")
            await expect(live.locator(".live-state")).to_contain_text("0 frames · running")
            await expect(live.locator("img")).to_be_hidden()
            for n, colour in enumerate(((255, 0, 0), (0, 0, 255)), start=1):
                name, data = _png(colour)
                rec.add_frame(name, data)  # as the proxy does, step by step
                url = f"/b/live/r/{planned.rollout_id}/artifacts/{name}"
                await expect(live.locator("img")).to_have_attribute("src", url)
                await expect(live).to_have_attribute("data-frames", str(n))
            await expect(live.locator("img")).to_be_visible()
            shown = await live.locator("img").evaluate("i => i.complete && i.naturalWidth")
            assert shown == W
            rec.finish("completed", answer="done", reward=1.0)
            await expect(live).to_have_attribute("data-ended", "1")
            await expect(live.locator(".live-state")).to_contain_text("completed (ended)")
            unknown = await page.request.get(view.at("/api/b/live/r/nope/frame"))
            assert unknown.status == 404


# -- end to end: a ComputerAgent batch through the proxy --------------------------------

DESKTOP_ENV = """
from proctor import Environment

screen = Environment("screen")
desktop = screen.add_desktop(320, 200)


@screen.template
async def look():
    yield "Click the middle of the screen, then say done."
    yield 1.0
"""

COMPUTER_AGENT = """
from proctor.agents import ComputerAgent


async def computer(run):
    await ComputerAgent("openai/gpt-4.1-mini")(run)
"""


def _computer_batch(root: Path, fake: FakeModelServer) -> Path:
    root.mkdir(parents=True)
    (root / "env.py").write_text(DESKTOP_ENV)
    (root / "agents.py").write_text(COMPUTER_AGENT)
    (root / "tasks.json").write_text(json.dumps([{"env": "screen", "id": "look", "slug": "look"}]))
    config = root / "desk.toml"
    config.write_text(
        'name = "desk"\nmax_concurrent = 1\nexpected_rollouts = 1\n'
        '[taskset]\nsource = "tasks.json"\nenv_source = "env.py"\n'
        '[runtime]\nkind = "local"\ntrusted = true\n[timeouts]\nrollout = 60\n'
        f'[[agents]]\nkind = "python"\nagent = "agents.py:computer"\n'
        f'model = "openai/gpt-4.1-mini@{fake.url}"\n'
    )
    return config


async def test_a_computer_agents_batch_shows_its_frames_and_clicks(
    page: Page, tmp_path: Path
) -> None:
    click = {"type": "click", "x": 160, "y": 100, "button": "left", "count": 1}
    script = [Reply.actions(click), Reply.actions({"type": "done"})]
    async with FakeModelServer(script, models=("gpt-4.1-mini",)) as fake:
        out = tmp_path / "desk"
        result = await aexecute(_computer_batch(tmp_path / "work", fake), out)
    assert result.launched, result
    (row,) = list_rollouts(out)
    assert row["status"] == "completed", row
    async with proctor_view(out, log_dir=tmp_path) as view:
        await page.goto(view.at(f"/b/desk/r/{row['id']}"))
        cells = page.locator("#filmstrip figure.frame")
        await expect(cells).to_have_count(2)
        first, second = await cells.all()
        await expect(first).to_have_attribute("data-turn", "1")
        marker = first.locator("a.frame-open g.mark-click")
        await expect(marker).to_have_attribute("data-x", "160")
        await expect(marker).to_have_attribute("data-y", "100")
        await expect(second.locator("figcaption .note")).to_have_text("done")
        loaded = await first.locator("a.frame-open svg image").evaluate(
            "i => fetch(i.getAttribute('href')).then(r => r.status)"
        )
        assert loaded == 200
