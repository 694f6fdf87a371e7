"""A rollout's JSONL streams read a page at a time, never whole: a 300 MiB `trace.jsonl`
costs one page of memory and one page of HTML.

A page starts at a byte offset (a line start) and holds at most `PAGE_STEPS` steps and
about `PAGE_BYTES` bytes of them; the next page starts where it ended, the previous one
is found by scanning back from its start. A line over `LINE_LIMIT` bytes is not parsed:
it shows as a placeholder step. `model_turns.jsonl` is matched to the trace's model
turns by count, so a page's cursor also carries how many came before it.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any, BinaryIO

from ..store import parse_object

__all__ = [
    "LINE_LIMIT",
    "PAGE_BYTES",
    "PAGE_STEPS",
    "TOO_LONG",
    "Cursor",
    "Page",
    "agent_turns",
    "read_page",
    "records",
    "turn_lines",
]

PAGE_STEPS = 200
PAGE_BYTES = 2 * 1024 * 1024
LINE_LIMIT = 1024 * 1024
TOO_LONG = "too_long"  # the kind of a line's placeholder step
_CHUNK = 1 << 16


@dataclass(frozen=True, slots=True)
class Cursor:
    """Where a page starts: `at` bytes into `trace.jsonl`, after `turns` model turns."""

    at: int = 0
    turns: int = 0

    @classmethod
    def parse(cls, at: str | None, turns: str | None) -> Cursor:
        """From the query string's `at` and `turns`.

        Raises:
            ValueError: not non-negative integers.
        """
        values = [int(v) if v and v.isascii() and v.isdigit() else None for v in (at, turns)]
        if (at and values[0] is None) or (turns and values[1] is None):
            raise ValueError("at and turns must be non-negative integers")
        return cls(values[0] or 0, values[1] or 0)


@dataclass(slots=True)
class Page:
    """One page of steps, where it started and where its neighbours start."""

    cursor: Cursor
    steps: list[dict[str, Any]] = field(default_factory=list)
    next: Cursor | None = None
    prev: Cursor | None = None
    torn: int = 0  # bytes of a last line still being written (or torn by a crash)


def read_page(f: BinaryIO, cursor: Cursor) -> Page:
    """The page of `f` (a trace) at `cursor`.

    Raises:
        ValueError: `cursor.at` is not the start of a line of `f`.
    """
    at = cursor.at
    if at:
        f.seek(at - 1)
        if f.read(1) != b"\n":
            raise ValueError(f"byte {at} does not start a step")
    f.seek(at)
    page = Page(cursor)
    used = 0
    for size, step in _lines(f):
        if page.steps and (len(page.steps) >= PAGE_STEPS or used + size > PAGE_BYTES):
            page.next = Cursor(at + used, cursor.turns + agent_turns(page.steps))
            break
        if step is None:  # a torn last line: the stream ends here for now
            page.torn = size
            break
        if step:
            page.steps.append(step)
        used += size
    if at:
        page.prev = _prev(f, cursor)
    return page


def records(f: BinaryIO) -> Iterator[dict[str, Any]]:
    """The JSON objects of `f`'s complete lines (none over `LINE_LIMIT`), streamed."""
    for _, record in _lines(f):
        if record is None:
            return
        if record and record.get("kind") != TOO_LONG:
            yield record


def turn_lines(f: BinaryIO, first: int, count: int) -> list[dict[str, Any]]:
    """`model_turns.jsonl` lines `first` to `first + count` as the transcript counts them
    (by turn: a retried turn's later line wins, in the place of its first)."""
    places: dict[Any, tuple[int, int]] = {}
    pos = 0
    n = 0
    for size, line in _lines(f):
        if line is None:
            break
        if line and line.get("kind") != TOO_LONG:
            places[line.get("turn", f"#{n}")] = (pos, size)
            n += 1
        pos += size
    out: list[dict[str, Any]] = []
    for start, size in list(places.values())[first : first + count]:
        f.seek(start)
        record = parse_object(f.read(size))
        if record is not None:
            out.append(record)
    return out


def _lines(f: BinaryIO) -> Iterator[tuple[int, dict[str, Any] | None]]:
    """(bytes, record) per complete line from the current position: `{}` for a line
    that is not a JSON object, a placeholder step for one over `LINE_LIMIT`; a torn
    last line ends it as (bytes, None)."""
    while line := f.readline(LINE_LIMIT + 1):
        if line.endswith(b"\n"):
            yield len(line), parse_object(line) or {}
            continue
        rest = None if len(line) <= LINE_LIMIT else _skip_line(f)
        if rest is None:
            yield len(line), None
            return
        size = len(line) + rest
        yield size, {"kind": TOO_LONG, "content": f"[a step of {size:,} bytes: too large to show]"}


def _skip_line(f: BinaryIO) -> int | None:
    """Read past the end of the current line; its remaining bytes, or None at EOF."""
    skipped = 0
    while chunk := f.read(_CHUNK):
        end = chunk.find(b"\n")
        if end >= 0:
            f.seek(end + 1 - len(chunk), 1)
            return skipped + end + 1
        skipped += len(chunk)
    return None


def agent_turns(steps: list[dict[str, Any]]) -> int:
    """The agent's model turns among `steps` (a simulated user's, `data["user"]`, are
    not in `model_turns.jsonl`)."""
    return sum(1 for s in steps if s.get("kind") == "model_turn" and not _users(s))


def _users(step: dict[str, Any]) -> bool:
    data = step.get("data")
    return isinstance(data, dict) and bool(data.get("user"))


def _prev(f: BinaryIO, cursor: Cursor) -> Cursor:
    """The page ending where `cursor` starts: up to `PAGE_STEPS` lines and `PAGE_BYTES`
    bytes back (at least one line)."""
    at = cursor.at
    lo = max(0, at - PAGE_BYTES)
    f.seek(lo)
    block = f.read(at - lo)
    # Line starts in the block, latest first: after each newline but the last one.
    starts = [lo + i + 1 for i in _newlines(block[:-1])]
    if lo == 0:
        starts.append(0)
    start = starts[min(len(starts), PAGE_STEPS) - 1] if starts else _line_start(f, lo)
    f.seek(start)
    steps = [s for _, s in _lines_until(f, at) if s]
    return Cursor(start, max(0, cursor.turns - agent_turns(steps)))


def _newlines(block: bytes) -> Iterator[int]:
    i = block.rfind(b"\n")
    while i >= 0:
        yield i
        i = block.rfind(b"\n", 0, i)


def _line_start(f: BinaryIO, before: int) -> int:
    """The start of the line holding byte `before` (scanning back a chunk at a time)."""
    pos = before
    while pos > 0:
        lo = max(0, pos - _CHUNK)
        f.seek(lo)
        i = f.read(pos - lo).rfind(b"\n")
        if i >= 0:
            return lo + i + 1
        pos = lo
    return 0


def _lines_until(f: BinaryIO, end: int) -> Iterator[tuple[int, dict[str, Any] | None]]:
    pos = f.tell()
    for size, step in _lines(f):
        if pos >= end:
            return
        pos += size
        yield size, step
