"""The rollout page, its artifact downloads, and the diff of two rollouts' transcripts.

Names from the URL are looked up, never joined into paths unchecked: a batch by name,
a rollout in the batch's index, an attempt among the archived ones, an artifact among
the names its `SHA256SUMS` lists.
"""

from __future__ import annotations

import asyncio
import difflib
import json
import os
import sqlite3
from collections.abc import AsyncIterator, Mapping
from typing import Any
from urllib.parse import quote

from .._http import Response
from ..batch import JsonlReader, _index, read_events
from ._data import BatchDir, read_log, rollout_detail
from ._pages import render
from ._transcript import shape_rollout, transcript_text

__all__ = ["artifact", "diff_page", "rollout_page"]

_HTML = "text/html; charset=utf-8"
_WIDTH = 1000.0
_DIFF_LINES = 20_000
_CONTEXT = 3
_CHUNK = 1 << 16


# -- the rollout page -------------------------------------------------------------------


async def rollout_page(
    batches: Mapping[str, BatchDir], batch: BatchDir, rid: str, params: Mapping[str, str]
) -> Response:
    """`/b/NAME/r/ID[?attempt=N]`: the transcript, ruler, artifacts, log, other batches."""
    page = await asyncio.to_thread(_rollout_data, batches, batch, rid, params.get("attempt"))
    if page is None:
        return _not_found()
    return Response.text(render("rollout.html", **page), content_type=_HTML)


def _rollout_data(
    batches: Mapping[str, BatchDir], batch: BatchDir, rid: str, attempt: str | None
) -> dict[str, Any] | None:
    detail = rollout_detail(batch, rid)
    if detail is None:
        return None
    folder = os.path.join(batch.path, "rollouts", rid)
    if attempt:
        if not (attempt.isascii() and attempt.isdigit()) or int(attempt) not in detail.get(
            "attempts", ()
        ):
            return None
        attempt = str(int(attempt))
        folder = os.path.join(folder, "attempts", attempt)
        detail = _archived(folder, detail)
    r = shape_rollout(detail)
    log, cut = _log(batch, rid, folder, attempt)
    return {
        "batch": batch.name,
        "rid": rid,
        "r": r,
        "log": log,
        "cut": cut,
        "viewing": int(attempt) if attempt else None,
        "ruler": ruler(_phases(batch, rid, r["meta"].get("attempt")), r),
        "artifacts": _artifacts(folder, r["artifacts"]),
        "others": [n for n, b in batches.items() if n != batch.name and _known(b, rid)],
    }


def _archived(root: str, detail: dict[str, Any]) -> dict[str, Any]:
    """An earlier attempt's files (in `root`), read like `read_rollout` reads the current one."""
    record = _json(os.path.join(root, "rollout.json"))
    return {
        "record": record,
        "index": None,
        "model_turns": list(JsonlReader(os.path.join(root, "model_turns.jsonl"))),
        "trace": list(JsonlReader(os.path.join(root, "trace.jsonl"))),
        "artifacts": _manifest(os.path.join(root, "artifacts", "SHA256SUMS")),
        "attempts": detail.get("attempts"),
    }


def _log(batch: BatchDir, rid: str, folder: str, attempt: str | None) -> tuple[str, bool]:
    if not attempt:
        return read_log(batch, rid)
    try:
        with open(os.path.join(folder, "log.txt"), "rb") as f:
            data = f.read((1 << 20) + 1)
    except FileNotFoundError:
        return "", False
    return data[: 1 << 20].decode("utf-8", "replace"), len(data) > 1 << 20


def _known(batch: BatchDir, rid: str) -> bool:
    """Whether the batch's index has this rollout (False for an index not readable yet)."""
    try:
        db = _index.connect(os.path.join(batch.path, "index.sqlite"), write=False)
    except sqlite3.Error:
        return False
    try:
        return db.execute("SELECT 1 FROM rollouts WHERE id=?", (rid,)).fetchone() is not None
    except sqlite3.Error:
        return False
    finally:
        db.close()


def _json(file: str) -> dict[str, Any] | None:
    try:
        with open(file, "rb") as f:
            value = json.loads(f.read())
    except (FileNotFoundError, ValueError):
        return None
    return value if isinstance(value, dict) else None


# -- the time ruler ---------------------------------------------------------------------


def _phases(batch: BatchDir, rid: str, attempt: Any) -> list[tuple[float, str]]:
    """(time, phase) changes of this rollout's `attempt`, from `events.jsonl` (streamed)."""
    out: list[tuple[float, str]] = []
    current: Any = None
    for event in read_events(batch.path):
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


def _manifest(file: str) -> dict[str, str]:
    """`SHA256SUMS` as name -> digest (the last line for a name counts)."""
    try:
        with open(file, encoding="utf-8", errors="replace") as f:
            pairs = [line.rstrip("\n").split("  ", 1) for line in f if "  " in line]
    except FileNotFoundError:
        return {}
    return {name: digest for digest, name in pairs if _plain(name)}


def _plain(name: str) -> bool:
    """A file name that stays inside its folder."""
    bad = "/" in name or "\\" in name or "\0" in name
    return bool(name) and not bad and name not in (".", "..", "SHA256SUMS")


def _artifacts(folder: str, manifest: Mapping[str, str]) -> list[dict[str, Any]]:
    out = []
    for name, digest in sorted(manifest.items()):
        if not _plain(name):
            continue
        try:
            size: int | None = os.stat(os.path.join(folder, "artifacts", name)).st_size
        except OSError:
            size = None
        out.append({"name": name, "sha256": digest, "size": size})
    return out


async def artifact(batch: BatchDir, rid: str, name: str) -> Response:
    """`/b/NAME/r/ID/artifacts/FILE`: a file `SHA256SUMS` lists, as an attachment
    (the app adds `nosniff` to every response)."""
    file = await asyncio.to_thread(_artifact_file, batch, rid, name)
    if file is None:
        return _not_found()
    size = os.stat(file).st_size
    headers = [
        ("content-type", "application/octet-stream"),
        ("content-length", str(size)),
        ("content-disposition", _disposition(name)),
    ]
    return Response(200, headers, _chunks(file, size))


def _artifact_file(batch: BatchDir, rid: str, name: str) -> str | None:
    if not _plain(name) or not _known(batch, rid):
        return None
    folder = os.path.join(batch.path, "rollouts", rid, "artifacts")
    if name not in _manifest(os.path.join(folder, "SHA256SUMS")):
        return None
    file = os.path.join(folder, name)
    return file if os.path.isfile(file) else None


def _disposition(name: str) -> str:
    ascii_name = "".join(
        c if c.isascii() and c.isprintable() and c not in '"\\' else "_" for c in name
    )
    return f"attachment; filename=\"{ascii_name}\"; filename*=UTF-8''{quote(name, safe='')}"


async def _chunks(file: str, size: int) -> AsyncIterator[bytes]:
    """Exactly `size` bytes of `file` (the length sent), read off the event loop."""
    f = await asyncio.to_thread(open, file, "rb")
    try:
        left = size
        while left > 0:
            data = await asyncio.to_thread(f.read, min(_CHUNK, left))
            if not data:
                data = b"\0" * left  # the file shrank under us: keep the length promised
            left -= len(data)
            yield data
    finally:
        f.close()


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
    try:
        detail = rollout_detail(batch, rid)
    except ValueError:
        return None
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


def _not_found() -> Response:
    return Response.text(render("404.html"), 404, content_type=_HTML)
