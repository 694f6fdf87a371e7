"""The live view of a running batch: the tally's arithmetic, plain lines, the rich panel."""

from __future__ import annotations

import asyncio
import io
import re
import sys

import pytest

from proctor.batch._tally import STATES, Tally
from proctor.batch._view import LiveView
from proctor.testing import FakeClock

ANSI = re.compile(r"\x1b\[[0-9;?]*[A-Za-z]")


class Signalling(io.StringIO):
    """A text stream that sets an event on every write, so tests wait without sleeping."""

    def __init__(self) -> None:
        super().__init__()
        self.wrote = asyncio.Event()

    def write(self, s: str) -> int:
        self.wrote.set()
        return super().write(s)

    def text(self) -> str:
        return ANSI.sub("", self.getvalue())


def finish(tally: Tally, state: str, *, reward: float | None, cost: float | None) -> None:
    for old, new in (("queued", "starting"), ("starting", "running"), ("running", state)):
        tally.move(old, new)
    tally.ended(reward=reward, cost=cost)


def test_tally_counts_rate_eta_and_mean_reward_with_presets_left_out_of_the_rate() -> None:
    clock = FakeClock(100.0)
    tally = Tally(10, clock=clock.now)
    tally.preset("done", 3)
    tally.preset("failed", 1)
    clock.advance(2.0)
    finish(tally, "done", reward=1.0, cost=0.25)
    finish(tally, "done", reward=0.5, cost=None)
    tally.add_cost(0.5)
    tally.move("queued", "starting")
    tally.move("starting", "queued")  # a launch retry
    tally.move("queued", "starting")

    snap = tally.snapshot()

    assert snap["counts"] == {
        "queued": 3,
        "starting": 1,
        "running": 0,
        "grading": 0,
        "done": 5,
        "failed": 1,
        "interrupted": 0,
    }
    assert sum(snap["counts"].values()) == snap["total"] == 10
    assert snap["finished"] == 6
    assert snap["finished_here"] == 2
    assert snap["elapsed_s"] == 2.0
    assert snap["rate_per_s"] == 1.0
    assert snap["eta_s"] == 4.0  # 4 left at 1/s
    assert snap["cost_usd"] == 0.75
    assert snap["reward_mean"] == 0.75
    assert snap["graded"] == 2


def test_tally_has_no_eta_or_reward_before_anything_finishes_and_zero_eta_at_the_end() -> None:
    clock = FakeClock()
    tally = Tally(2, clock=clock.now)
    first = tally.snapshot()
    assert (first["rate_per_s"], first["eta_s"], first["reward_mean"]) == (0.0, None, None)

    clock.advance(1.0)
    tally.preset("done", 1)
    assert tally.snapshot()["eta_s"] is None  # a preset gives no rate

    finish(tally, "failed", reward=None, cost=0.1)
    last = tally.snapshot()
    assert (last["finished"], last["eta_s"], last["graded"], last["reward_mean"]) == (
        2,
        0.0,
        0,
        None,
    )


def test_tally_counts_a_rollout_once_even_when_it_moves_between_final_states() -> None:
    tally = Tally(1, clock=FakeClock().now)
    finish(tally, "done", reward=1.0, cost=None)
    tally.move("done", "interrupted")
    assert tally.snapshot()["finished_here"] == 1


def test_preset_takes_only_final_states() -> None:
    tally = Tally(5)
    with pytest.raises(ValueError, match="running"):
        tally.preset("running", 2)
    assert tally.snapshot()["counts"]["queued"] == 5


def test_render_line_says_every_count_the_pace_cost_and_reward() -> None:
    clock = FakeClock()
    tally = Tally(1000, clock=clock.now)
    for _ in range(120):
        finish(tally, "done", reward=0.9, cost=0.0001)
    for _ in range(3):
        finish(tally, "failed", reward=None, cost=None)
    for _ in range(2):
        tally.move("queued", "starting")
    clock.advance(3.0)

    line = LiveView(tally, stream=io.StringIO(), title="letters").render_line()

    assert line == (
        "batch letters: 120/1000 done 3 failed 0 interrupted | running 0 grading 0 "
        "starting 2 queued 875 | 41.0/s eta 21s | cost $0.0120 | reward 0.900"
    )


@pytest.mark.parametrize(
    ("total", "eta"), [(2, "eta 1s"), (100, "eta 1m39s"), (10_000, "eta 2h46m"), (1, "eta 0s")]
)
def test_render_line_spells_etas_in_seconds_minutes_and_hours(total: int, eta: str) -> None:
    clock = FakeClock()
    tally = Tally(total, clock=clock.now)
    finish(tally, "done", reward=None, cost=None)
    clock.advance(1.0)
    assert f"1.0/s {eta} |" in LiveView(tally, stream=io.StringIO()).render_line()


async def test_plain_mode_prints_the_final_line_at_exit() -> None:
    stream = io.StringIO()
    tally = Tally(2)
    async with LiveView(tally, stream=stream, title="t", interval=0.01) as view:
        finish(tally, "done", reward=1.0, cost=None)
        finish(tally, "failed", reward=None, cost=None)
        final = view.render_line()

    lines = stream.getvalue().splitlines()
    assert lines[-1].split(" | ")[0] == final.split(" | ")[0]
    assert lines[-1].startswith("batch t: 1/2 done 1 failed 0 interrupted")
    assert "\x1b" not in stream.getvalue()


async def test_plain_mode_prints_the_final_line_when_cancelled() -> None:
    stream = Signalling()
    tally = Tally(3)
    inside = asyncio.Event()

    async def run() -> None:
        async with LiveView(tally, stream=stream, interval=0.01):
            finish(tally, "interrupted", reward=None, cost=None)
            inside.set()
            await asyncio.Event().wait()

    task = asyncio.create_task(run())
    await inside.wait()
    assert stream.getvalue() == ""  # no line before the 10 s period
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task

    assert (
        stream.getvalue()
        .splitlines()[-1]
        .startswith(
            "batch: 0/3 done 0 failed 1 interrupted | running 0 grading 0 starting 0 queued 2"
        )
    )


async def test_plain_mode_prints_the_final_line_when_the_block_raises() -> None:
    stream = io.StringIO()
    with pytest.raises(RuntimeError, match="boom"):
        async with LiveView(Tally(1), stream=stream):
            raise RuntimeError("boom")
    assert stream.getvalue().startswith("batch: 0/1 done")


@pytest.fixture
def terminal(monkeypatch: pytest.MonkeyPatch) -> None:
    """A terminal rich can move the cursor on, wide enough for the panel on one line a row."""
    pytest.importorskip("rich")
    monkeypatch.setenv("TERM", "xterm-256color")
    monkeypatch.setenv("COLUMNS", "100")


@pytest.mark.usefixtures("terminal")
async def test_tty_mode_draws_a_panel_refreshes_it_and_leaves_the_final_one() -> None:
    stream = Signalling()
    tally = Tally(4)

    async with LiveView(tally, stream=stream, title="letters", tty=True, interval=0.01):
        first = stream.text()
        assert "batch letters" in first
        assert "queued 4" in first
        stream.wrote.clear()
        tally.move("queued", "starting")
        tally.move("starting", "running")
        await asyncio.wait_for(stream.wrote.wait(), 10)
        assert "running 1" in stream.text()[len(first) :]
        finish(tally, "done", reward=0.5, cost=0.02)
        finish(tally, "failed", reward=None, cost=None)
        drawn = len(stream.text())

    final = stream.text()[drawn:]
    for shown in ("queued 1", "running 1", "done 1", "failed 1", "2/4", "$0.0200", "0.500"):
        assert shown in final
    assert "\x1b[" in stream.getvalue()  # a terminal: colours and cursor moves


@pytest.mark.parametrize("without", ["rich", "a smart terminal"])
async def test_tty_mode_falls_back_to_plain_lines_without_rich_or_a_smart_terminal(
    monkeypatch: pytest.MonkeyPatch, without: str
) -> None:
    if without == "rich":
        monkeypatch.setitem(sys.modules, "rich.console", None)
        monkeypatch.setitem(sys.modules, "rich.live", None)
    else:
        pytest.importorskip("rich")
        monkeypatch.setenv("TERM", "dumb")
    stream = io.StringIO()
    tally = Tally(1)
    async with LiveView(tally, stream=stream, tty=True, interval=0.01):
        finish(tally, "done", reward=1.0, cost=None)
    (line,) = stream.getvalue().splitlines()
    assert line.startswith("batch: 1/1 done 0 failed 0 interrupted | running 0 grading 0")


def test_states_are_the_documented_ones() -> None:
    assert STATES == ("queued", "starting", "running", "grading", "done", "failed", "interrupted")
