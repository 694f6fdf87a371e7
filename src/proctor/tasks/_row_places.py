"""`row_places`: where each row of a taskset is in its file, for messages about rows."""

from __future__ import annotations

import contextlib
from pathlib import Path

from ._taskset import Taskset, _row_lines

__all__ = ["row_places"]


def row_places(source: str, taskset: Taskset) -> dict[str, str]:
    """`source:line` of each row, by slug, for a `.json` or `.jsonl` source whose rows
    are the taskset's; otherwise `source row N (slug)`."""
    path = Path(source)
    slugs = [t.slug for t in taskset]
    lines: list[int] | None = None
    if path.suffix == ".jsonl":
        raw = path.read_bytes().split(b"\n")
        lines = [n for n, line in enumerate(raw, 1) if line.strip()]
    elif path.suffix == ".json":
        with contextlib.suppress(Exception):
            lines = _row_lines(path.read_text())
    if lines is not None and len(lines) == len(slugs):
        return {slug: f"{source}:{line}" for slug, line in zip(slugs, lines, strict=True)}
    return {slug: f"{source} row {i} ({slug})" for i, slug in enumerate(slugs, 1)}
