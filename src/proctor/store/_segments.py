"""Segment files: every rollout record, appended to `rollouts/segment-NNN.jsonl`.

A record is one JSON line; the `rollout` event that follows it names where it is
(`"record": [segment, offset, length]`) and the index keeps that location. Appending
to an open file replaces a file created, written and renamed per rollout (the costliest
write there was, and a 4 KiB block for a 1 KB record). A segment is closed for writing
past `SEGMENT_BYTES`; the next one continues the numbering.

A line is appended and its event written under one lock, in that order, so the only
line an event can be missing for is the last one written (a kill between the two):
`records_end` in the index's meta says where the witnessed lines end, and reopening
reads the lines after it (see `_recover`).
"""

from __future__ import annotations

import os
import re
from typing import Any

from . import _files

__all__ = ["SEGMENT_BYTES", "Segments", "read_line", "segment_name", "segment_numbers"]

SEGMENT_BYTES = 256 << 20
_NAME = re.compile(r"segment-(\d{3,9})\.jsonl")


def segment_name(n: int) -> str:
    """The file name of segment `n` (`segment-000.jsonl`)."""
    return f"segment-{n:03d}.jsonl"


def segment_numbers(rollouts: str) -> list[int]:
    """The numbers of the segments in the folder `rollouts`, in order."""
    try:
        names = os.listdir(rollouts)
    except FileNotFoundError:
        return []
    return sorted(int(m.group(1)) for name in names if (m := _NAME.fullmatch(name)))


class Segments:
    """The segment being appended to (opened on the first record). Not thread-safe: the
    journal calls it under its lock."""

    def __init__(self, rollouts: str, *, strict: bool) -> None:
        self._rollouts = rollouts
        self._strict = strict
        self._fd: int | None = None
        numbers = segment_numbers(rollouts)
        self.number = numbers[-1] if numbers else 0
        self.size = 0

    def append(self, data: bytes) -> list[int]:
        """Append one record line; its location `[segment, offset, length]`."""
        if self._fd is None:
            self._open()
        elif self.size and self.size + len(data) > SEGMENT_BYTES:
            self.close()
            self.number += 1
            self._open()
        assert self._fd is not None
        offset = self.size
        _files.write_all(self._fd, data)
        if self._strict:
            os.fsync(self._fd)
        self.size += len(data)
        return [self.number, offset, len(data)]

    @property
    def end(self) -> tuple[int, int]:
        """(segment, offset) just past the last line appended."""
        return self.number, self.size

    def close(self) -> None:
        if self._fd is not None:
            os.close(self._fd)
            self._fd = None

    def _open(self) -> None:
        path = os.path.join(self._rollouts, segment_name(self.number))
        created = not os.path.exists(path)
        self._fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT | os.O_CLOEXEC, 0o644)
        self.size = os.fstat(self._fd).st_size
        if created and self._strict:
            _files.fsync_dir(self._rollouts)


def read_line(rollouts: str, location: tuple[int, int, int], rid: str) -> dict[str, Any] | None:
    """The record at `location` when it is one JSON object of rollout `rid` ending in a
    newline; None otherwise (missing, cut short, or not that rollout's). A link is not
    followed."""
    segment, offset, length = location
    path = os.path.join(rollouts, segment_name(segment))
    try:
        fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC | os.O_NOFOLLOW)
    except OSError:
        return None
    try:
        data = os.pread(fd, length, offset)
    finally:
        os.close(fd)
    if len(data) != length or not data.endswith(b"\n"):
        return None
    record = _files.parse_object(data)
    return record if record is not None and record.get("id") == rid else None
