"""The rollout page, its artifact downloads, and the diff of two rollouts' transcripts.

Names from the URL are looked up, never joined into paths unchecked: a batch by name,
a rollout in the batch's index, an attempt among the archived ones, an artifact among
the names its `SHA256SUMS` lists. Files are read by `_rollout_files`: regular files
inside the output directory only, the transcript a page at a time.
"""

from __future__ import annotations

import asyncio
import contextlib
import difflib
import os
import sqlite3
from collections.abc import AsyncIterator, Mapping
from typing import Any, BinaryIO
from urllib.parse import quote, urlencode

from .._errors import StoreError
from .._http import Response
from ._data import BatchDir, attempts, index_row, unpriced_model
from ._files import _Refused, open_inside
from ._filmstrip import filmstrip, frame_cells, frame_url, newest_frame
from ._pages import render
from ._rollout_files import (
    artifact_sizes,
    events,
    frame,
    manifest,
    plain,
    read_files,
    read_json,
    read_log,
)
from ._trace_pages import Cursor, Page
from ._transcript import proxy_turns, shape_rollout, transcript_text

__all__ = ["artifact", "diff_page", "live_frame", "rollout_api", "rollout_page"]

_HTML = "text/html; charset=utf-8"
_WIDTH = 1000.0
_DIFF_LINES = 20_000
_CONTEXT = 3
_CHUNK = 1 << 16


# -- the rollout page -------------------------------------------------------------------


async def rollout_page(
    batches: Mapping[str, BatchDir], batch: BatchDir, rid: str, params: Mapping[str, str]
) -> Response:
    """`/b/NAME/r/ID[?attempt=N][&at=BYTE&turns=N]`: the transcript's page at `at`,
    ruler, artifacts, log, other batches.

    Raises:
        ValueError: `at`/`turns` are not a page's start (a 400).
    """
    cursor = Cursor.parse(params.get("at"), params.get("turns"))
    attempt = params.get("attempt")
    page = await asyncio.to_thread(_rollout_data, batches, batch, rid, attempt, cursor)
    if page is None:
        return _not_found()
    return Response.text(render("rollout.html", **page), content_type=_HTML)


async def rollout_api(batch: BatchDir, rid: str, params: Mapping[str, str]) -> Response:
    """`/api/b/NAME/r/ID[?at=BYTE&turns=N]`: the rollout's files as JSON, the trace and
    model turns a page at a time (`page.next`: the next page's `at` and `turns`)."""
    cursor = Cursor.parse(params.get("at"), params.get("turns"))
    data = await asyncio.to_thread(_api_data, batch, rid, cursor)
    if data is None:
        return Response.json({"error": "not found"}, 404)
    return Response.json(data)


def _api_data(batch: BatchDir, rid: str, cursor: Cursor) -> dict[str, Any] | None:
    detail = _detail(batch, rid, None, cursor)
    if detail is None:
        return None
    page: Page = detail.pop("page")
    folder = ("rollouts", rid)
    refused = detail["refused"]
    log, cut = read_log(batch.path, folder, refused)
    return {
        **detail,
        "id": rid,
        "checkpoint": read_json(batch.path, (*folder, "checkpoint.json"), refused),
        "evaluation": read_json(batch.path, (*folder, "evaluation", "status.json"), refused),
        "workspace": workspace(batch.path, folder, detail["artifacts"], refused),
        "log": log,
        "log_cut": cut,
        "page": {
            "at": page.cursor.at,
            "turns": page.cursor.turns,
            "next": None if page.next is None else {"at": page.next.at, "turns": page.next.turns},
        },
    }


def _detail(
    batch: BatchDir, rid: str, attempt: int | None, cursor: Cursor
) -> dict[str, Any] | None:
    """What `shape_rollout` takes, for a rollout the index knows (else None); the
    trace's `page` and the files `refused` too."""
    row = index_row(batch, rid)
    if row is None:
        return None
    refused: list[str] = []
    files = read_files(batch.path, rid, attempt, cursor, refused)
    index = row if attempt is None else None
    return {**files, "index": index, "attempts": attempts(batch, rid), "refused": refused}


def _rollout_data(
    batches: Mapping[str, BatchDir],
    batch: BatchDir,
    rid: str,
    attempt: str | None,
    cursor: Cursor,
) -> dict[str, Any] | None:
    n: int | None = None
    if attempt:
        if not (attempt.isascii() and attempt.isdigit()) or int(attempt) not in attempts(
            batch, rid
        ):
            return None
        n = int(attempt)
    detail = _detail(batch, rid, n, cursor)
    if detail is None:
        return None
    folder = ("rollouts", rid) if n is None else ("rollouts", rid, "attempts", str(n))
    refused = detail["refused"]
    turns = proxy_turns(detail["model_turns"]) if n is None else []
    r = shape_rollout(detail)
    log, cut = read_log(batch.path, folder, refused)
    status = r["meta"].get("status")
    return {
        "batch": batch.name,
        "rid": rid,
        "r": r,
        "log": log,
        "cut": cut,
        "viewing": n,
        "unpriced": unpriced_model(batch, r["meta"].get("model"), r["meta"].get("cost")),
        "ruler": ruler(_phases(batch, rid, r["meta"].get("attempt"), refused), r),
        "artifacts": artifact_sizes(batch.path, folder, r["artifacts"]),
        "workspace": workspace(batch.path, folder, r["artifacts"], refused),
        "others": [o for o, b in batches.items() if o != batch.name and _known(b, rid)],
        "refused": refused,
        "paging": _paging(detail["page"], n),
        "filmstrip": filmstrip(frame_cells(batch.path, batch.name, rid, turns)),
        "live": None if n is not None or status in _ENDED else _live_url(batch.name, rid),
    }


# A rollout in one of these states writes no more frames (the live frame stops).
_ENDED = ("completed", "failed", "interrupted")


def _live_url(batch: str, rid: str) -> str:
    return f"/api/b/{quote(batch, safe='')}/r/{quote(rid, safe='')}/frame"


async def live_frame(batch: BatchDir, rid: str) -> Response:
    """`/api/b/NAME/r/ID/frame`: the rollout's newest frame (its URL, or null), how many
    frames it has, its status and whether it has ended (no more frames come)."""
    found = await asyncio.to_thread(_newest, batch, rid)
    if found is None:
        return Response.json({"error": "not found"}, 404)
    return Response.json(found)


def _newest(batch: BatchDir, rid: str) -> dict[str, Any] | None:
    row = index_row(batch, rid)
    if row is None:
        return None
    name, count = newest_frame(batch.path, rid)
    status = row.get("status")
    return {
        "frame": None if name is None else frame_url(batch.name, rid, name),
        "frames": count,
        "status": status,
        "ended": status in _ENDED,
    }


def _paging(page: Page, attempt: int | None) -> dict[str, Any]:
    """The transcript's page links (query strings), or None where there is no such page."""

    def link(cursor: Cursor | None) -> str | None:
        if cursor is None:
            return None
        query: dict[str, int] = {} if attempt is None else {"attempt": attempt}
        if cursor.at:
            query |= {"at": cursor.at, "turns": cursor.turns}
        return "?" + urlencode(query) if query else "?"

    return {
        "at": page.cursor.at,
        "first": link(Cursor()) if page.cursor.at else None,
        "prev": link(page.prev),
        "next": link(page.next),
    }


def _known(batch: BatchDir, rid: str) -> bool:
    """Whether the batch's index has this rollout (False for an index not readable yet)."""
    try:
        return index_row(batch, rid) is not None
    except (sqlite3.Error, StoreError):  # another batch's index: absent, locked, damaged
        return False


# -- the time ruler ---------------------------------------------------------------------


def _phases(batch: BatchDir, rid: str, attempt: Any, refused: list[str]) -> list[tuple[float, str]]:
    """(time, phase) changes of this rollout's `attempt`, from `events.jsonl` (streamed)."""
    out: list[tuple[float, str]] = []
    current: Any = None
    for event in events(batch.path, refused):
        if event.get("type") != "rollout" or event.get("id") != rid:
            continue
        current = event.get("attempt", current)
        if current != attempt:
            continue
        if "started_at" in event:
            out = []
        t, phase = event.get("t"), event.get("phase")
        fresh = not out or out[-1][1] != phase
        if isinstance(t, int | float) and isinstance(phase, str) and fresh:
            out.append((float(t), phase))
    return out


def ruler(changes: list[tuple[float, str]], r: dict[str, Any]) -> dict[str, Any] | None:
    """Phase bars and a bar per timed turn, tool call and tool result, on one axis
    (`x`/`w` in a 1000-wide view box), with five ticks; None when nothing is timed."""
    meta = r["meta"]
    end = meta.get("ended_at")
    spans = [(i["start"], i["end"], i) for i in r["entries"] if i.get("start") is not None]
    times = [t for t, _ in changes] + [t for s, e, _ in spans for t in (s, e)]
    times += [end] if isinstance(end, int | float) else []
    if not times:
        return None
    t0, t1 = min(times), max(times)
    span = max(t1 - t0, 1e-6)

    def bar(start: float, stop: float) -> dict[str, float]:
        x = (start - t0) / span * _WIDTH
        return {"x": round(x, 2), "w": round(max((stop - start) / span * _WIDTH, 1.0), 2)}

    phases = [
        {"phase": p, "secs": nxt - t, **bar(t, nxt)}
        for (t, p), nxt in zip(changes, [c[0] for c in changes[1:]] + [t1], strict=True)
        if p != "done"
    ]
    bars = [
        {"kind": i["kind"], "label": _label(i), "secs": e - s, **bar(s, e)} for s, e, i in spans
    ]
    ticks = [{"x": n * _WIDTH / 4, "label": f"{n * span / 4:.3g} s"} for n in range(5)]
    return {"phases": phases, "bars": bars, "ticks": ticks, "total": t1 - t0}


def _label(item: dict[str, Any]) -> str:
    if item["kind"] == "turn":
        return f"turn {item.get('turn') or ''}".strip()
    return f"{item['kind']} {item.get('name') or ''}".strip()


# -- artifacts --------------------------------------------------------------------------


def workspace(
    root: str, folder: tuple[str, ...], listed: Mapping[str, str], refused: list[str]
) -> dict[str, Any] | None:
    """The rollout's workspace diff (`artifacts/workspace.json`, when `SHA256SUMS` lists
    it) with each entry's `mode` as octal text; None when there is none."""
    if "workspace.json" not in listed:
        return None
    found = read_json(root, (*folder, "artifacts", "workspace.json"), refused)
    if found is None:
        return None
    out: dict[str, Any] = {"truncated": bool(found.get("truncated"))}
    out["errors"] = [str(e) for e in found.get("errors") or [] if isinstance(e, str)]
    for key in ("created", "modified", "deleted"):
        items = found.get(key)
        entries = [e for e in items if isinstance(e, dict)] if isinstance(items, list) else []
        out[key] = [{**e, "mode": _octal(e.get("mode"))} for e in entries]
    return out


def _octal(mode: Any) -> str:
    return f"{mode:04o}" if isinstance(mode, int) and not isinstance(mode, bool) else ""


async def artifact(batch: BatchDir, rid: str, name: str) -> Response:
    """`/b/NAME/r/ID/artifacts/FILE`: a regular file inside the output directory that
    `SHA256SUMS` lists, as an attachment (the app adds `nosniff` to every response);
    `.../artifacts/frames/FILE`, a frame the proxy kept, as its image type, inline."""
    opened = await asyncio.to_thread(_artifact_file, batch, rid, name)
    if isinstance(opened, str):
        return _not_found(opened)
    f, size = opened
    kind = _FRAME_TYPES.get(os.path.splitext(name)[1]) if frame(name) else None
    headers = [
        ("content-type", kind or "application/octet-stream"),
        ("content-length", str(size)),
        ("content-disposition", "inline" if kind else _disposition(name)),
    ]
    return Response(200, headers, _chunks(f, size))


# A frame the proxy kept is an image the rollout page shows (`nosniff` holds it to it).
_FRAME_TYPES = {
    ".png": "image/png",
    ".jpg": "image/jpeg",
    ".gif": "image/gif",
    ".webp": "image/webp",
}


def _artifact_file(batch: BatchDir, rid: str, name: str) -> tuple[BinaryIO, int] | str:
    """The artifact opened (no link followed) and its size, or why it is not served."""
    if not (plain(name) or frame(name)) or not _known(batch, rid):
        return "No such artifact."
    folder = ("rollouts", rid, "artifacts")
    if name not in manifest(batch.path, folder, [], frames=True):
        return "No such artifact: SHA256SUMS does not list it."
    try:
        f = open_inside(batch.path, *folder, *name.split("/"))
    except FileNotFoundError:
        return "No such artifact: the file is missing."
    except _Refused:
        return "Not served: the artifact is a symbolic link or not a regular file."
    return f, os.fstat(f.fileno()).st_size


def _disposition(name: str) -> str:
    ascii_name = "".join(
        c if c.isascii() and c.isprintable() and c not in '"\\' else "_" for c in name
    )
    return f"attachment; filename=\"{ascii_name}\"; filename*=UTF-8''{quote(name, safe='')}"


async def _chunks(f: BinaryIO, size: int) -> AsyncIterator[bytes]:
    """Exactly `size` bytes of `f` (the length sent), read off the event loop."""
    with contextlib.closing(f):
        left = size
        while left > 0:
            data = await asyncio.to_thread(f.read, min(_CHUNK, left))
            if not data:
                data = b"\0" * left  # the file shrank under us: keep the length promised
            left -= len(data)
            yield data


# -- the diff ---------------------------------------------------------------------------


async def diff_page(batches: Mapping[str, BatchDir], params: Mapping[str, str]) -> Response:
    """`/diff?a=NAME/ID&b=NAME/ID`: a line diff of the two rollouts' transcripts."""
    a, b = _side(batches, params.get("a", "")), _side(batches, params.get("b", ""))
    if a is None or b is None:
        return _not_found()
    ta, tb = await asyncio.to_thread(_text, *a), await asyncio.to_thread(_text, *b)
    if ta is None or tb is None:
        return _not_found()
    html = render("diff.html", a=params["a"], b=params["b"], rows=diff_rows(ta, tb))
    return Response.text(html, content_type=_HTML)


def _side(batches: Mapping[str, BatchDir], value: str) -> tuple[BatchDir, str] | None:
    name, _, rid = value.partition("/")
    batch = batches.get(name)
    return None if batch is None or not rid else (batch, rid)


def _text(batch: BatchDir, rid: str) -> str | None:
    """The transcript's first page as text (a diff of two pages at most)."""
    detail = _detail(batch, rid, None, Cursor())
    return None if detail is None else transcript_text(shape_rollout(detail))


def diff_rows(a: str, b: str) -> list[dict[str, Any]]:
    """Rows `same`/`removed`/`added`, and `skip` for long unchanged runs (context 3)."""
    la, lb = a.splitlines()[:_DIFF_LINES], b.splitlines()[:_DIFF_LINES]
    rows: list[dict[str, Any]] = []
    for op, i1, i2, j1, j2 in difflib.SequenceMatcher(None, la, lb).get_opcodes():
        if op == "equal":
            rows += _same(la, i1, i2, j1)
            continue
        rows += [{"cls": "removed", "a": i + 1, "b": "", "text": la[i]} for i in range(i1, i2)]
        rows += [{"cls": "added", "a": "", "b": j + 1, "text": lb[j]} for j in range(j1, j2)]
    return rows


def _same(lines: list[str], i1: int, i2: int, j1: int) -> list[dict[str, Any]]:
    def row(i: int) -> dict[str, Any]:
        return {"cls": "same", "a": i + 1, "b": j1 + i - i1 + 1, "text": lines[i]}

    if i2 - i1 <= 2 * _CONTEXT + 1:
        return [row(i) for i in range(i1, i2)]
    skipped = {"cls": "skip", "a": "", "b": "", "text": f"… {i2 - i1 - 2 * _CONTEXT} same lines"}
    head = [row(i) for i in range(i1, i1 + _CONTEXT)]
    return head + [skipped] + [row(i) for i in range(i2 - _CONTEXT, i2)]


def _not_found(reason: str = "") -> Response:
    return Response.text(render("404.html", reason=reason), 404, content_type=_HTML)
