"""One rollout's files as the dashboard reads them: only regular files inside the output
directory (`_files`), the transcript a page at a time (`_trace_pages`), every file
bounded. A file refused (a link, not a regular file, too large) is named in `refused`,
never read.
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Iterator, Mapping
from typing import Any

import orjson

from .. import store
from .._errors import StoreError
from ._files import _Refused, open_inside, stat_inside
from ._trace_pages import PAGE_STEPS, Cursor, Page, agent_turns, read_page, records, turn_lines

__all__ = [
    "LOG_LIMIT",
    "RECORD_LIMIT",
    "artifact_sizes",
    "events",
    "manifest",
    "plain",
    "read_files",
    "read_json",
    "read_log",
    "read_record",
]

LOG_LIMIT = 1024 * 1024
RECORD_LIMIT = 16 * 1024 * 1024


def read_files(
    root: str, rid: str, attempt: int | None, cursor: Cursor, refused: list[str]
) -> dict[str, Any]:
    """What `shape_rollout` needs of rollout `rid` (`attempt`: an archived one), with
    the trace's page at `cursor` and the model turns matched to it; `page` is the
    `Page`. Files refused are named in `refused`.

    Raises:
        ValueError: `cursor` is not the start of a step.
    """
    folder = ("rollouts", rid) if attempt is None else ("rollouts", rid, "attempts", str(attempt))
    torn: dict[str, int] = {}
    if attempt is None:
        record = read_record(root, rid, refused, torn)
    else:
        record = _json(root, (*folder, "rollout.json"), refused, torn)
    page = _trace(root, folder, cursor, refused)
    if page.torn:
        torn["trace.jsonl"] = page.torn
    turns = agent_turns(page.steps)  # those `model_turns.jsonl` holds
    # The last page also holds the proxy's turns past the trace's (at most a page).
    count = turns if page.next is not None else turns + PAGE_STEPS
    return {
        "record": record,
        "model_turns": _turns(root, folder, cursor.turns, count, refused),
        "trace": page.steps,
        "page": page,
        "torn": torn,
        "artifacts": manifest(root, (*folder, "artifacts"), refused),
    }


def events(root: str, refused: list[str]) -> Iterator[dict[str, Any]]:
    """The batch's `events.jsonl` records, streamed (none when it is missing or refused)."""
    try:
        f = open_inside(root, "events.jsonl")
    except FileNotFoundError:
        return
    except _Refused as exc:
        refused.append(str(exc))
        return
    with f:
        yield from records(f)


def read_log(root: str, folder: tuple[str, ...], refused: list[str]) -> tuple[str, bool]:
    """The first `LOG_LIMIT` bytes of `folder/log.txt` as text (U+FFFD for bad bytes),
    and whether there was more."""
    data = _read(root, (*folder, "log.txt"), LOG_LIMIT + 1, refused)
    if data is None:
        return "", False
    return data[:LOG_LIMIT].decode("utf-8", "replace"), len(data) > LOG_LIMIT


def manifest(
    root: str, folder: tuple[str, ...], refused: list[str], frames: bool = False
) -> dict[str, str]:
    """`folder/SHA256SUMS` as name -> digest (the last line for a name counts), plain
    names only; with `frames`, also the proxy's frames (`frames/<plain name>`)."""
    data = _read(root, (*folder, "SHA256SUMS"), RECORD_LIMIT, refused)
    lines = (data or b"").decode("utf-8", "replace").splitlines()
    pairs = (line.split("  ", 1) for line in lines if "  " in line)
    return {name: digest for digest, name in pairs if plain(name) or (frames and frame(name))}


def frame(name: str) -> bool:
    """A frame's artifact name: `frames/` and a plain file name."""
    return name.startswith("frames/") and plain(name[7:])


def plain(name: str) -> bool:
    """A file name that stays inside its folder (and is not the manifest)."""
    bad = "/" in name or "\\" in name or "\0" in name
    return bool(name) and not bad and name not in (".", "..", "SHA256SUMS")


def artifact_sizes(
    root: str, folder: tuple[str, ...], listed: Mapping[str, str]
) -> list[dict[str, Any]]:
    """Each listed artifact's name, digest and size (None: missing, a link, not regular)."""
    out = []
    for name, digest in sorted(listed.items()):
        st = stat_inside(root, *folder, "artifacts", name)
        out.append({"name": name, "sha256": digest, "size": None if st is None else st.st_size})
    return out


def _trace(root: str, folder: tuple[str, ...], cursor: Cursor, refused: list[str]) -> Page:
    try:
        f = open_inside(root, *folder, "trace.jsonl")
    except FileNotFoundError:
        return Page(cursor)
    except _Refused as exc:
        refused.append(str(exc))
        return Page(cursor)
    with f:
        return read_page(f, cursor)


def _turns(
    root: str, folder: tuple[str, ...], first: int, count: int, refused: list[str]
) -> list[dict[str, Any]]:
    if count <= 0:
        return []
    try:
        f = open_inside(root, *folder, "model_turns.jsonl")
    except FileNotFoundError:
        return []
    except _Refused as exc:
        refused.append(str(exc))
        return []
    with f:
        return turn_lines(f, first, count)


def read_json(root: str, names: tuple[str, ...], refused: list[str]) -> dict[str, Any] | None:
    """The JSON object in a regular file inside `root` (None: missing, refused, not an
    object, or over `RECORD_LIMIT` bytes)."""
    return _json(root, names, refused, {})


def read_record(
    root: str, rid: str, refused: list[str], torn: dict[str, int] | None = None
) -> dict[str, Any] | None:
    """The rollout's current record: its line in a segment file, or in a folder of
    layout 1 `rollouts/<id>.json` (None: none, refused, torn or another rollout's)."""
    torn = {} if torn is None else torn
    try:
        found = store.locate_record(root, rid)
    except StoreError:
        found = None
    if found is None:
        return _json(root, ("rollouts", f"{rid}.json"), refused, torn)
    name, offset, length = found
    if length > RECORD_LIMIT:
        refused.append(
            f"{os.path.join(root, 'rollouts', name)}: a record over {RECORD_LIMIT:,} bytes: "
            "not shown"
        )
        return None
    try:
        f = open_inside(root, "rollouts", name)
    except FileNotFoundError:
        torn[name] = length
        return None
    except _Refused as exc:
        refused.append(str(exc))
        return None
    with f:
        data = os.pread(f.fileno(), length, offset)
    try:
        value = orjson.loads(data)
    except orjson.JSONDecodeError:
        torn[name] = length
        return None
    return value if isinstance(value, dict) and value.get("id") == rid else None


def _json(
    root: str, names: tuple[str, ...], refused: list[str], torn: dict[str, int]
) -> dict[str, Any] | None:
    data = _read(root, names, RECORD_LIMIT + 1, refused)
    if data is None:
        return None
    if len(data) > RECORD_LIMIT:
        refused.append(f"{os.path.join(root, *names)}: over {RECORD_LIMIT:,} bytes: not shown")
        return None
    try:
        value = orjson.loads(data)
    except orjson.JSONDecodeError:
        torn[names[-1]] = len(data)
        return None
    return value if isinstance(value, dict) else None


def _read(root: str, names: tuple[str, ...], limit: int, refused: list[str]) -> bytes | None:
    """At most `limit` bytes of a regular file inside `root`; None when missing/refused."""
    try:
        f = open_inside(root, *names)
    except FileNotFoundError:
        return None
    except _Refused as exc:
        refused.append(str(exc))
        return None
    except OSError as exc:  # EACCES and the like: not shown, said why
        refused.append(f"{os.path.join(root, *names)}: {exc.strerror}")
        return None
    with contextlib.closing(f):
        # (not `read(limit)` alone: that allocates `limit` bytes whatever the size)
        return f.read(min(limit, os.fstat(f.fileno()).st_size + 1))
