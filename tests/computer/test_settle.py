"""`settle_ms`: a batch's frame waits for the app to redraw, within a limit.

An app draws some time after the input that changed it; without settling, the frame
after a batch can show the screen from before (a Tk form's first frame did)."""

from __future__ import annotations

import asyncio
import sys
from collections.abc import AsyncIterator

import pytest
from _frames import pixel

from proctor import RemoteError
from proctor.env import DesktopClient, DesktopServer

# A white window that turns green `DELAY` ms after a click: long enough that a frame
# taken at once is always still white, whatever the load.
DELAY = 1500
APP = f"""
import tkinter as tk
root = tk.Tk()
root.geometry("320x200+0+0")
root.configure(background="#ffffff")
root.bind("<Button-1>", lambda e: root.after({DELAY}, lambda: root.configure(background="#00ff00")))
root.after(100, lambda: print("up", flush=True))
root.mainloop()
"""
WHITE, GREEN = (255, 255, 255), (0, 255, 0)


@pytest.fixture
async def slow_app() -> AsyncIterator[DesktopClient]:
    async with DesktopServer(320, 200) as desktop:
        await desktop.launch([sys.executable, "-c", APP])
        async with DesktopClient(desktop.url) as client:
            loop = asyncio.get_running_loop()
            deadline = loop.time() + 20
            while pixel(await client.screenshot(), 160, 100) != WHITE:
                assert loop.time() < deadline, "the app never showed its window"
                await asyncio.sleep(0.05)
            yield client


async def test_a_settled_frame_shows_the_redraw_and_an_unsettled_one_does_not(
    slow_app: DesktopClient,
) -> None:
    at_once = await slow_app.act([{"type": "click", "x": 160, "y": 100}])
    assert at_once is not None and pixel(at_once, 160, 100) == WHITE
    settled = await slow_app.act([{"type": "move", "x": 1, "y": 1}], settle_ms=5000)
    assert settled is not None and pixel(settled, 160, 100) == GREEN


async def test_a_batch_that_changes_nothing_waits_only_its_limit(slow_app: DesktopClient) -> None:
    loop = asyncio.get_running_loop()
    start = loop.time()
    frame = await slow_app.act([{"type": "move", "x": 5, "y": 5}], settle_ms=300)
    assert frame is not None and loop.time() - start < 10  # returned, the screen unchanged


@pytest.mark.parametrize("bad", [-1, 10_001, 1.5, True, "100"])
async def test_a_bad_settle_is_refused_before_anything_runs(
    slow_app: DesktopClient, bad: object
) -> None:
    with pytest.raises(RemoteError, match=r"settle_ms: an integer in 0\.\.10000") as caught:
        await slow_app.act([{"type": "click", "x": 160, "y": 100}], settle_ms=bad)  # type: ignore[arg-type]
    assert caught.value.code == -32602
