"""A rollout's frames as a filmstrip beside its transcript, and its newest frame.

A frame is an image the interception proxy kept (`artifacts/frames/<sha256>.<ext>`,
listed in `SHA256SUMS`), referred to from `model_turns.jsonl`. Each model turn that sent
the model a new frame gets a cell: the newest frame among its new messages (the screen
the model saw), with the screen actions its response chose drawn on it (the actions that
led to the next frame): a numbered dot per click, a ring per move or scroll, a line per
drag path, and the rest (type, key, wait) as text. A cell links to its turn in the
transcript and opens a large view (CSS `:target`, no script).

Frames are written when the proxy records the turn whose request carried them, that is
once the model answered it: the newest frame of a running rollout is the last `frames/`
line of its `SHA256SUMS` (a frame seen before keeps its first line).

Everything is drawn on the server as SVG: only numbers and escaped text go into the
markup, and an image's URL is the rollout's own artifact route for a listed frame.
"""

from __future__ import annotations

import struct
from collections.abc import Mapping
from typing import Any
from urllib.parse import quote

from markupsafe import Markup, escape

from ._files import _Refused, open_inside
from ._filmstrip_actions import Mark, marks
from ._rollout_files import manifest

__all__ = [
    "CELLS_LIMIT",
    "filmstrip",
    "frame_cells",
    "frame_url",
    "image_size",
    "newest_frame",
]

CELLS_LIMIT = 500
"""Cells shown at most (the turns of one transcript page)."""

_HEAD = 64 * 1024  # bytes read of a frame to find its size
_R = 0.02  # a marker's radius, as a share of the frame's larger side
_LIMIT = 1e6  # coordinates are clamped to this (recorded data: anything goes)


def frame_cells(
    root: str, batch: str, rid: str, turns: list[dict[str, Any]]
) -> list[dict[str, Any]]:
    """A cell per turn that sent a frame the rollout's `SHA256SUMS` lists (the frames
    served): `{turn, frame, url, size, marks}`. `turns` are `model_turns.jsonl` lines
    of the current attempt (a retried turn once)."""
    folder = ("rollouts", rid)
    listed = manifest(root, (*folder, "artifacts"), [], frames=True)
    cells: list[dict[str, Any]] = []
    for n, line in enumerate(turns):
        shown = _newest(_dict(line.get("context")).get("new"))
        if shown is None or shown not in listed:
            continue
        turn = line.get("turn")
        cells.append(
            {
                "turn": turn if isinstance(turn, int) and not isinstance(turn, bool) else n + 1,
                "frame": shown,
                "url": frame_url(batch, rid, shown),
                "size": image_size(root, (*folder, "artifacts", *shown.split("/"))),
                "marks": marks(line.get("response")),
            }
        )
        if len(cells) >= CELLS_LIMIT:
            break
    return cells


def frame_url(batch: str, rid: str, name: str) -> str:
    """Where the dashboard serves frame `name` (`frames/<file>`) of rollout `rid`."""
    return f"/b/{quote(batch, safe='')}/r/{quote(rid, safe='')}/artifacts/{quote(name)}"


def _newest(value: Any) -> str | None:
    """The last frame reference (`{"type": "image", "path": "frames/..."}`) in `value`."""
    stack = [value]
    while stack:  # depth first, last child first: the first found is the last in order
        item = stack.pop()
        if isinstance(item, list):
            stack.extend(item)
        elif isinstance(item, dict):
            path = item.get("path")
            if item.get("type") == "image" and isinstance(path, str) and _frame_name(path):
                return path
            stack.extend(item.values())
    return None


def _frame_name(path: str) -> bool:
    folder, _, file = path.partition("/")
    stem, dot, ext = file.partition(".")
    digits = len(stem) == 64 and all(c in "0123456789abcdef" for c in stem)
    return folder == "frames" and digits and dot == "." and ext in ("png", "jpg", "gif", "webp")


def newest_frame(root: str, rid: str) -> tuple[str | None, int]:
    """The newest frame of rollout `rid` (`frames/<sha256>.<ext>`, or None) and how many
    frames its `SHA256SUMS` lists."""
    listed = manifest(root, ("rollouts", rid, "artifacts"), [], frames=True)
    names = [name for name in listed if name.startswith("frames/")]
    return (names[-1] if names else None), len(names)


# -- image size -------------------------------------------------------------------------


def image_size(root: str, names: tuple[str, ...]) -> tuple[int, int] | None:
    """(width, height) from a PNG, GIF, JPEG or WebP file's header; None when unknown."""
    try:
        f = open_inside(root, *names)
    except (OSError, _Refused):
        return None
    with f:
        head = f.read(_HEAD)
    size = _png(head) or _gif(head) or _webp(head) or _jpeg(head)
    return size if size and 0 < size[0] <= 100_000 and 0 < size[1] <= 100_000 else None


def _png(b: bytes) -> tuple[int, int] | None:
    if b[:8] == b"\x89PNG\r\n\x1a\n" and b[12:16] == b"IHDR" and len(b) >= 24:
        w, h = struct.unpack(">II", b[16:24])
        return int(w), int(h)
    return None


def _gif(b: bytes) -> tuple[int, int] | None:
    if b[:6] in (b"GIF87a", b"GIF89a") and len(b) >= 10:
        w, h = struct.unpack("<HH", b[6:10])
        return int(w), int(h)
    return None


def _webp(b: bytes) -> tuple[int, int] | None:
    if b[:4] != b"RIFF" or b[8:12] != b"WEBP" or len(b) < 30:
        return None
    chunk = b[12:16]
    if chunk == b"VP8X":
        return 1 + int.from_bytes(b[24:27], "little"), 1 + int.from_bytes(b[27:30], "little")
    if chunk == b"VP8L":
        bits = int.from_bytes(b[21:25], "little")
        return 1 + (bits & 0x3FFF), 1 + ((bits >> 14) & 0x3FFF)
    if chunk == b"VP8 ":
        w, h = struct.unpack("<HH", b[26:30])
        return int(w) & 0x3FFF, int(h) & 0x3FFF
    return None


def _jpeg(b: bytes) -> tuple[int, int] | None:
    """The size in the first start-of-frame marker (within the bytes read)."""
    if b[:2] != b"\xff\xd8":
        return None
    i = 2
    while i + 9 <= len(b):
        if b[i] != 0xFF:
            return None
        marker = b[i + 1]
        if marker in (0xD8, 0x01) or 0xD0 <= marker <= 0xD7:
            i += 2
            continue
        length = int.from_bytes(b[i + 2 : i + 4], "big")
        if 0xC0 <= marker <= 0xCF and marker not in (0xC4, 0xC8, 0xCC):
            h, w = struct.unpack(">HH", b[i + 5 : i + 9])
            return int(w), int(h)
        i += 2 + length
    return None


# -- drawing ----------------------------------------------------------------------------


def filmstrip(cells: list[dict[str, Any]]) -> Markup:
    """`<aside id="filmstrip">`: a figure per cell, each with its large view; empty
    markup when there are no cells."""
    if not cells:
        return Markup("")
    out = [
        '<aside id="filmstrip" aria-label="frames">',
        f'<h2>Frames <small class="frame-count">{len(cells)}</small></h2>',
    ]
    for i, cell in enumerate(cells):
        out.append(_cell(cell, i))
    out.append("</aside>")
    return Markup("".join(out))


def _cell(cell: Mapping[str, Any], i: int) -> str:
    url = escape(cell["url"])
    turn, frame = int(cell["turn"]), escape(cell["frame"])
    notes = [m for m in cell["marks"] if not m["points"]]
    drawn = len(cell["marks"]) - len(notes)
    caption = (
        f'<a class="turn-link" href="#turn-{turn}">turn {turn}</a>'
        f'<span class="drawn">{drawn} drawn</span>'
        + "".join(f'<span class="note">{escape(m["label"])}</span>' for m in notes[:20])
        + (f'<span class="note">… {len(notes) - 20} more</span>' if len(notes) > 20 else "")
    )
    small = _picture(url, cell["size"], cell["marks"], f"frame of turn {turn}")
    large = _picture(url, cell["size"], cell["marks"], f"frame of turn {turn}, large")
    return (
        f'<figure class="frame" id="frame-cell-{i}" data-turn="{turn}" data-frame="{frame}">'
        f'<a class="frame-open" href="#frame-{i}" title="open large">{small}</a>'
        f"<figcaption>{caption}</figcaption>"
        f'<div class="frame-large" id="frame-{i}" role="dialog" aria-label="frame, large">'
        f'<a class="frame-close" href="#frame-cell-{i}">close</a>{large}'
        f'<p class="large-caption">{caption}</p></div></figure>'
    )


def _picture(url: str, size: Any, drawn: list[Mark], label: str) -> str:
    """The frame with its marks over it; a plain image when its size is unknown."""
    if not size:
        return f'<img class="frame-image" alt="{escape(label)}" src="{url}">'
    w, h = size
    r = max(w, h) * _R
    parts = [
        f'<svg class="frame-view" xmlns="http://www.w3.org/2000/svg" viewBox="0 0 {w} {h}"'
        f' role="img" aria-label="{escape(label)}">'
        f'<image href="{url}" x="0" y="0" width="{w}" height="{h}"/>'
    ]
    n = 0
    for mark in drawn:
        points = [(_clamp(x), _clamp(y)) for x, y in mark["points"]]
        if not points:
            continue
        n += 1
        parts.append(_shape(mark["kind"], points, r, n, escape(mark["label"])))
    parts.append("</svg>")
    return "".join(parts)


def _shape(kind: str, points: list[tuple[float, float]], r: float, n: int, label: str) -> str:
    x, y = points[0]
    title = f"<title>{n}. {label}</title>"
    if kind == "drag":
        coords = " ".join(f"{px:.1f},{py:.1f}" for px, py in points)
        ex, ey = points[-1]
        return (
            f'<g class="mark mark-drag" data-n="{n}">{title}'
            f'<polyline points="{coords}"/>'
            f'<circle class="end" cx="{ex:.1f}" cy="{ey:.1f}" r="{r / 2:.1f}"/>'
            f"{_number(x, y, r, n)}</g>"
        )
    cls = {"click": "mark-click", "move": "mark-move", "scroll": "mark-scroll"}.get(kind, "")
    return (
        f'<g class="mark {cls}" data-n="{n}" data-x="{x:g}" data-y="{y:g}">{title}'
        f'<circle cx="{x:.1f}" cy="{y:.1f}" r="{r:.1f}"/>{_number(x, y, r, n)}</g>'
    )


def _number(x: float, y: float, r: float, n: int) -> str:
    return f'<text x="{x + r * 1.3:.1f}" y="{y - r * 1.3:.1f}" font-size="{r * 2:.1f}">{n}</text>'


def _clamp(v: float) -> float:
    return max(-_LIMIT, min(_LIMIT, v))


def _dict(value: Any) -> dict[str, Any]:
    return value if isinstance(value, dict) else {}
