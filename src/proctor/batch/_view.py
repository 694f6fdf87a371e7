"""LiveView: a running batch's progress on the terminal, redrawn on a timer.

On a terminal, a rich live panel (counts by state in colour, a progress bar,
throughput, ETA, cost and mean reward) refreshed every `interval`; elsewhere (a log
file, CI, a dumb terminal, or rich not installed) one plain line every
`max(interval, 10 s)`. Either way the final state is drawn once more at exit, whatever
ends the block. The view reads the `Tally` only when it draws, never per change.
"""

from __future__ import annotations

import asyncio
import sys
from collections.abc import Callable
from typing import IO, TYPE_CHECKING, Any

from .._resource import AsyncResource
from ._tally import Tally

if TYPE_CHECKING:
    from rich.console import RenderableType
    from rich.live import Live
    from rich.text import Text

PLAIN_PERIOD = 10.0
_ROWS = (("done", "failed", "interrupted"), ("running", "grading", "starting", "queued"))
COLOURS = {
    "queued": "dim",
    "starting": "cyan",
    "running": "blue",
    "grading": "magenta",
    "done": "green",
    "failed": "red",
    "interrupted": "yellow",
}


class LiveView(AsyncResource):
    """Shows `tally` on `stream` while the `async with` block runs."""

    def __init__(
        self,
        tally: Tally,
        *,
        stream: IO[str] = sys.stderr,
        title: str = "",
        interval: float = 0.5,
        tty: bool | None = None,
    ) -> None:
        self._tally = tally
        self._stream = stream
        self._title = title
        self._tty = stream.isatty() if tty is None else tty
        self._interval = interval
        self._live: Live | None = None
        self._task: asyncio.Task[None] | None = None

    async def start(self) -> None:
        """Draw the first frame and start redrawing on the timer."""
        if self._tty:
            self._live = _start_live(self._stream, self._panel)
        period = self._interval if self._live else max(self._interval, PLAIN_PERIOD)
        self._task = asyncio.get_running_loop().create_task(self._refresh(period))

    async def aclose(self) -> None:
        """Stop redrawing and leave the last frame on the terminal."""
        task = self._task
        self._task = None
        if task is not None:
            task.cancel()
        try:
            self._finish()
        finally:
            if task is not None:
                await _reap(task)

    def render_line(self) -> str:
        """The plain one-line summary, e.g. `batch letters: 120/1000 done 3 failed ...`."""
        return _line(self._title, self._tally.snapshot())

    async def _refresh(self, period: float) -> None:
        while True:
            await asyncio.sleep(period)
            self._draw()

    def _draw(self) -> None:
        if self._live is not None:
            self._live.update(self._panel(), refresh=True)
        else:
            self._stream.write(self.render_line() + "\n")
            self._stream.flush()

    def _finish(self) -> None:
        """The last drawing: a plain line, or the panel that stays once the Live stops."""
        live, self._live = self._live, None
        if live is None:
            self._draw()
            return
        try:
            live.update(self._panel())
        finally:
            live.stop()  # redraws once more, restores the cursor and stdout/stderr

    def _panel(self) -> RenderableType:
        return _panel(self._title, self._tally.snapshot())


async def _reap(task: asyncio.Task[None]) -> None:
    """Wait for the cancelled refresh task; a drawing error in it is raised here."""
    await asyncio.wait([task])
    if not task.cancelled():
        task.result()


def _line(title: str, snap: dict[str, Any]) -> str:
    c = snap["counts"]
    return (
        f"{_name(title)}: {c['done']}/{snap['total']} done {c['failed']} failed "
        f"{c['interrupted']} interrupted | running {c['running']} grading {c['grading']} "
        f"starting {c['starting']} queued {c['queued']} | {_pace(snap)} | "
        f"cost ${snap['cost_usd']:.4f} | reward {_reward(snap['reward_mean'])}"
    )


def _name(title: str) -> str:
    return f"batch {title}" if title else "batch"


def _pace(snap: dict[str, Any]) -> str:
    eta = snap["eta_s"]
    return f"{snap['rate_per_s']:.1f}/s eta {'-' if eta is None else _duration(eta)}"


def _reward(mean: float | None) -> str:
    return "-" if mean is None else f"{mean:.3f}"


def _duration(seconds: float) -> str:
    """`21s`, `3m05s`, `2h07m`."""
    s = round(seconds)
    if s < 60:
        return f"{s}s"
    if s < 3600:
        return f"{s // 60}m{s % 60:02d}s"
    return f"{s // 3600}h{s % 3600 // 60:02d}m"


def _start_live(stream: IO[str], first: Callable[[], RenderableType]) -> Live | None:
    """A started rich Live display on `stream`; None without rich, or on a dumb terminal."""
    try:
        from rich.console import Console
        from rich.live import Live
    except ImportError:
        return None
    console = Console(file=stream, force_terminal=True)
    if console.is_dumb_terminal:  # no cursor moves: a Live would show nothing until the end
        return None
    live = Live(first(), console=console, auto_refresh=False, transient=False)
    live.start(refresh=True)
    return live


def _panel(title: str, snap: dict[str, Any]) -> RenderableType:
    """The rich panel: progress bar, counts by state in colour, pace, cost, reward."""
    from rich.console import Group
    from rich.panel import Panel
    from rich.progress_bar import ProgressBar
    from rich.table import Table
    from rich.text import Text

    total, finished = snap["total"], snap["finished"]
    bar = Table.grid(padding=(0, 1))
    bar.add_row(
        ProgressBar(total=max(total, 1), completed=finished, width=40),
        Text(f"{finished}/{total} ({100 * finished / max(total, 1):.0f}%)"),
    )
    counts = [_counts(snap["counts"], row) for row in _ROWS]
    tail = Text(
        f"{_pace(snap)}  cost ${snap['cost_usd']:.4f}  "
        f"reward {_reward(snap['reward_mean'])} (n={snap['graded']})"
    )
    return Panel(Group(bar, *counts, tail), title=_name(title), title_align="left", expand=False)


def _counts(counts: dict[str, int], states: tuple[str, ...]) -> Text:
    """`done 120  failed 3 ...`, each state in its colour."""
    from rich.text import Text

    return Text("  ").join(
        Text.assemble((f"{state} ", COLOURS[state]), (str(counts[state]), f"bold {COLOURS[state]}"))
        for state in states
    )
