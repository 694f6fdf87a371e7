"""What reopening an output directory checks before a runner trusts it again.

`events.jsonl` is the witness of what ran: a rollout began when a `rollout` event
gave it a status past `queued` with its `attempt` and `started_at`, and the runner
writes no record before that event. A record is a line of a segment file followed by
the event that says where it is (`_segments`), so only the last line written can lack
its event. So reopening

- cuts a torn last line off the last segment (its event was never written), and holds
  each complete line after the last one the events witness as the record it claims to
  be: indexed when the events back it (a kill before its event), refused otherwise (a
  `refused` event; the line stays, unindexed, so no reader sees it);
- checks that every indexed record is still there, whole (a machine crash in `default`
  mode can lose a segment's tail while its events survived): a lost one is handled like
  an unreadable record (below);

- refuses a record the event log does not back (its rollout never began, or not that
  attempt, or not at that time): the file is moved to `rollouts/<id>/refused/<n>.json`,
  a `refused` event names it, and the rollout stays as its events say (one that never
  began runs);
- moves an unreadable record (cut short, not JSON) aside the same way, with a
  `recovered` event: a rollout that had ended is recorded `interrupted` (its result is
  lost), one that had not stays as its events say;
- rebuilds a corrupt `index.sqlite` from `events.jsonl`, and a lost or shortened
  `events.jsonl` from the index (which was its view), saying what was lost.

Each finding is an event and a `warning:` line; nothing is dropped silently. A
directory that lost both its event log and its index is refused: nothing is left to
check a record against. Costs stay flat per rollout: one `PRAGMA quick_check`, one
listing of `rollouts/`, two bytes of each ended record and a parse of each record of an
unfinished rollout.
"""

from __future__ import annotations

import contextlib
import os
import sqlite3
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from .._errors import StoreError
from . import _files, _index
from ._journal import Journal, load_record
from ._recorder import RolloutRecorder, index_fields
from ._segments import read_line, segment_name, segment_numbers

__all__ = [
    "Warn",
    "check_records",
    "damaged_index",
    "refuse_lost_history",
    "restate_lost_log",
    "set_index_aside",
    "to_stderr",
]

Warn = Callable[[str], None]
_SHOWN = 10  # warnings of one kind printed before the rest are counted
_IDENTITY = ("seq", "task", "agent", "model", "repeat")


def to_stderr(message: str) -> None:
    """The default `warn`: `warning: MESSAGE` on stderr."""
    print(f"warning: {message}", file=sys.stderr, flush=True)


# -- the index -----------------------------------------------------------------------------


def damaged_index(root: str) -> str | None:
    """Why `index.sqlite` cannot be trusted (SQLite's own check), or None (sound or absent)."""
    file = os.path.join(root, "index.sqlite")
    if not os.path.exists(file):
        return None
    try:
        db = sqlite3.connect(file, timeout=5.0, isolation_level=None)
    except sqlite3.DatabaseError as exc:
        return str(exc)
    try:
        rows = db.execute("PRAGMA quick_check(1)").fetchall()
        db.execute("SELECT COUNT(*) FROM rollouts").fetchone()
    except sqlite3.DatabaseError as exc:
        if not _index.is_corrupt(exc) and "no such table" not in str(exc):
            raise
        return str(exc)
    finally:
        db.close()
    verdict = str(rows[0][0]) if rows else "no answer"
    return None if verdict == "ok" else verdict


def set_index_aside(root: str) -> str:
    """Move a corrupt index to `index.sqlite.corrupt` (replacing an older one) and drop
    its WAL; returns the new name. The next connection builds an empty index."""
    file = os.path.join(root, "index.sqlite")
    for suffix in ("-wal", "-shm"):
        with contextlib.suppress(FileNotFoundError):
            os.unlink(file + suffix)
    with contextlib.suppress(FileNotFoundError):
        os.replace(file, file + ".corrupt")
    return "index.sqlite.corrupt"


def restate_lost_log(store: Journal, lost: int, warn: Warn) -> None:
    """`events.jsonl` is `lost` bytes shorter than the index says it was (deleted, cut):
    the index, its view, is the best witness left, so its rows go back into the log."""
    what = "missing" if store._events_size == 0 else f"{lost} bytes shorter than indexed"
    store.event("recovered", file="events.jsonl", lost_bytes=lost, rebuilt_from="index.sqlite")
    rows = _restate_rows(store)
    warn(
        f"{store.path}/events.jsonl was {what}: its history ({lost} bytes) is lost; "
        f"the {rows} rollouts index.sqlite knew are restated as events"
    )


def _restate_rows(store: Journal) -> int:
    """Append every index row to `events.jsonl` again (an `assigned` event, and a
    `rollout` event with the rest of its columns once it began), so a log that lost
    its history witnesses what the index still knew. Returns how many rows."""
    cols = ", ".join((*_index.COLUMNS, *_index.LOCATION))
    rows = store._db.execute(f"SELECT {cols} FROM rollouts ORDER BY seq").fetchall()
    now = time.time()
    lines = bytearray()
    for values in rows:
        row = dict(zip(_index.COLUMNS, values, strict=False))
        where = list(values[len(_index.COLUMNS) :])
        rid = row.pop("id")
        ident = {k: row.pop(k) for k in _IDENTITY}
        assigned = {"t": now, "type": "assigned", "id": rid, **ident, "status": "queued"}
        lines += store._encode(assigned)
        rest = {k: v for k, v in row.items() if v is not None}
        if None not in where:
            rest["record"] = where
            # (the lines up to here are witnessed again; a reopen reads those after)
            store._witnessed = max(store._witnessed, (where[0], where[1] + where[2]))
        if rest.get("status", "queued") != "queued":
            lines += store._encode({"t": now, "type": "rollout", "id": rid, **rest})
        if len(lines) >= 1 << 20:
            store._append_events(bytes(lines), None)  # the rows already say it
            lines = bytearray()
    store._append_events(bytes(lines), None)
    return len(rows)


# -- the records ---------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class _Assignment:
    rollout_id: str
    task: str
    agent: str | None
    model: str | None
    repeat: int


class _Findings:
    """Warnings of one kind: the first few in full, then a count."""

    def __init__(self, warn: Warn, kind: str) -> None:
        self.warn = warn
        self.kind = kind
        self.n = 0

    def add(self, message: str) -> None:
        self.n += 1
        if self.n <= _SHOWN:
            self.warn(message)

    def close(self, root: str) -> None:
        if self.n > _SHOWN:
            self.warn(f"{root}: {self.n - _SHOWN} more {self.kind} (see events.jsonl)")


def check_records(store: Journal, warn: Warn) -> None:
    """Hold every record present against its index row (the events' view), see above."""
    # The index is asked per id, not read whole: a 100,000-rollout batch's ids would
    # be held at once for what is a handful of lines and files.
    refused = _Findings(warn, "records refused")
    lost = _Findings(warn, "unreadable records")
    _check_tail(store, refused)
    _check_indexed(store, lost, refused)
    fd = os.open(store._rollouts, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
    try:
        names = sorted(e.name for e in os.scandir(fd) if e.name.endswith(".json"))
        for name in names:
            rid = name[:-5]
            found = store._db.execute(
                "SELECT status, record_segment FROM rollouts WHERE id=?", (rid,)
            ).fetchone()
            if found is None or found[1] is not None:
                continue  # not a rollout of this batch, or superseded by a segment line
            ended = found[0] in _index.ENDED
            if ended and _ends_whole(fd, name):
                continue  # the common case: one pread, no parse
            path = os.path.join(store._rollouts, name)
            record = _parse(path)
            row = _row(store._db, rid)
            if record is None:
                _unreadable(store, row, path, lost)
            elif ended:
                continue  # whole after all (written without the final newline)
            elif (why := _unbacked(row, record)) is not None:
                _refuse(store, row, path, record, why, refused)
            elif record.get("status") != row["status"]:
                _correct(store, rid, record)
    finally:
        os.close(fd)
    refused.close(store.path)
    lost.close(store.path)


def _check_tail(store: Journal, refused: _Findings) -> None:
    """The segment lines after the last one the events witness (see above)."""
    numbers = segment_numbers(store._rollouts)
    if not numbers:
        return
    last = os.path.join(store._rollouts, segment_name(numbers[-1]))
    torn = _files.truncate_torn_tail(last)
    if torn:
        store.event("recovered", file=f"rollouts/{segment_name(numbers[-1])}", torn_bytes=torn)
    first, start = store._witnessed
    for n in numbers:
        if n < first:
            continue
        offset = start if n == first else 0
        with open(os.path.join(store._rollouts, segment_name(n)), "rb") as f:
            f.seek(offset)
            data = f.read()
        for line in data.splitlines(keepends=True):
            where = [n, offset, len(line)]
            offset += len(line)
            record = _files.parse_object(line)
            rid = record.get("id") if record is not None else None
            if record is not None and isinstance(rid, str) and _indexed(store._db, rid):
                _unwitnessed(store, rid, record, where, refused)
        store._witnessed = max(store._witnessed, (n, offset))


def _unwitnessed(
    store: Journal, rid: str, record: dict[str, Any], where: list[int], refused: _Findings
) -> None:
    """A record line written just before a kill took its event: index it when the
    events back it (an ended rollout's, of its attempt: a lost amendment), else refuse."""
    row = _row(store._db, rid)
    if row["status"] in _index.ENDED:
        if record.get("attempt") == row["attempt"]:
            _correct(store, rid, record, where)
        return
    why = _unbacked(row, record)
    if why is None:
        _correct(store, rid, record, where)
        return
    file = f"rollouts/{segment_name(where[0])}"
    claimed = {k: record.get(k) for k in ("status", "attempt", "reward")}
    store.event("refused", id=rid, file=file, record=where, claimed=claimed, reason=why)
    refused.add(
        f"{store.path}: refused the record of {rid} at {file}:{where[1]} (claims "
        f"{claimed['status']}, reward {claimed['reward']!r}): {why}; left unindexed, the "
        f"rollout stays {row['status']}"
    )


def _check_indexed(store: Journal, lost: _Findings, refused: _Findings) -> None:
    """Every indexed segment record still there: an ended one ends whole (two bytes),
    an unfinished one parses as its rollout's record and is held against its row, as
    a record file is (refused when the events do not back it, else the row corrected
    to it when they differ)."""
    cols = ", ".join(("id", "status", *_index.LOCATION))
    rows = store._db.execute(
        f"SELECT {cols} FROM rollouts WHERE record_segment IS NOT NULL ORDER BY record_segment"
    ).fetchall()
    fds: dict[int, tuple[int, int]] = {}
    try:
        for rid, status, segment, offset, length in rows:
            if segment not in fds:
                fds[segment] = _open_segment(store._rollouts, segment)
            fd, size = fds[segment]
            if status in _index.ENDED and fd >= 0 and offset + length <= size:
                if os.pread(fd, 1, offset) + os.pread(fd, 1, offset + length - 1) == b"{\n":
                    continue
            elif (record := read_line(store._rollouts, (segment, offset, length), rid)) is not None:
                _hold(store, _row(store._db, rid), record, [segment, offset, length], refused)
                continue
            _lost_line(store, _row(store._db, rid), [segment, offset, length], lost)
    finally:
        for fd, _ in fds.values():
            if fd >= 0:
                os.close(fd)


def _hold(
    store: Journal,
    row: dict[str, Any],
    record: dict[str, Any],
    where: list[int],
    refused: _Findings,
) -> None:
    """An indexed record of an unfinished rollout against its row (see `_unbacked`)."""
    rid = row["id"]
    if (why := _unbacked(row, record)) is not None:
        file = f"rollouts/{segment_name(where[0])}"
        claimed = {k: record.get(k) for k in ("status", "attempt", "reward")}
        store._append_events(
            store._encode(
                {
                    "t": time.time(),
                    "type": "refused",
                    "id": rid,
                    "file": file,
                    "record": where,
                    "claimed": claimed,
                    "reason": why,
                }
            ),
            {rid: _index.location_fields(None)},
        )
        refused.add(
            f"{store.path}: refused the record of {rid} at {file}:{where[1]} (claims "
            f"{claimed['status']}, reward {claimed['reward']!r}): {why}; no longer indexed, "
            f"the rollout stays {row['status']}"
        )
    elif record.get("status") != row["status"]:
        _correct(store, rid, record, where)


def _open_segment(rollouts: str, n: int) -> tuple[int, int]:
    try:
        fd = os.open(os.path.join(rollouts, segment_name(n)), os.O_RDONLY | os.O_CLOEXEC)
    except FileNotFoundError:
        return -1, 0
    return fd, os.fstat(fd).st_size


def _lost_line(store: Journal, row: dict[str, Any], where: list[int], lost: _Findings) -> None:
    """An indexed record that is gone or broken: its location is dropped; an ended
    rollout is recorded `interrupted` (its result is lost)."""
    rid = row["id"]
    file = f"rollouts/{segment_name(where[0])}"
    store._append_events(
        store._encode(
            {
                "t": time.time(),
                "type": "recovered",
                "id": rid,
                "file": file,
                "record": where,
                "reason": "the indexed record is missing or cut short",
                "was": row["status"],
            }
        ),
        {rid: _index.location_fields(None)},
    )
    then = f"the rollout stays {row['status']}"
    if row["status"] in _index.ENDED:
        _record_lost(store, row, f"{file}:{where[1]}")
        then = "its result is lost: recorded interrupted (--retry-errors runs it again)"
    lost.add(
        f"{store.path}: the record of {rid} at {file}:{where[1]} is missing or cut short; {then}"
    )


def _indexed(db: sqlite3.Connection, rid: str) -> bool:
    return db.execute("SELECT 1 FROM rollouts WHERE id=?", (rid,)).fetchone() is not None


def _row(db: sqlite3.Connection, rid: str) -> dict[str, Any]:
    cols = ", ".join(_index.COLUMNS)
    values = db.execute(f"SELECT {cols} FROM rollouts WHERE id=?", (rid,)).fetchone()
    return dict(zip(_index.COLUMNS, values, strict=True))


def _ends_whole(dir_fd: int, name: str) -> bool:
    """Whether the file ends as every record is written (`}` and a newline)."""
    try:
        fd = os.open(name, os.O_RDONLY | os.O_CLOEXEC, dir_fd=dir_fd)
    except FileNotFoundError:
        return True
    try:
        size = os.fstat(fd).st_size
        return size >= 2 and os.pread(fd, 2, size - 2) == b"}\n"
    finally:
        os.close(fd)


def _parse(path: str) -> dict[str, Any] | None:
    """The record, or None when it is not a JSON object (cut short, overwritten)."""
    record = load_record(path)
    return record or None


def _unbacked(row: dict[str, Any], record: dict[str, Any]) -> str | None:
    """Why the event log does not back this record of an unfinished rollout, or None.

    A record is written only after the event that began its attempt, with that
    attempt's `started_at`; one ahead of its row otherwise is a kill between replacing
    the record and appending its event, and corrects the row.
    """
    if row["status"] in (None, "queued") or row["attempt"] is None:
        return "events.jsonl shows this rollout never began"
    if record.get("attempt") != row["attempt"]:
        return (
            f"it claims attempt {record.get('attempt')!r}; events.jsonl shows attempt "
            f"{row['attempt']} began"
        )
    if record.get("started_at") != row["started_at"]:
        return f"its started_at is not the one events.jsonl gives attempt {row['attempt']}"
    return None


def _set_aside(store: Journal, rid: str, path: str) -> str:
    """Move a record to `rollouts/<id>/refused/<n>.json`; its path relative to OUT."""
    folder = os.path.join(store._rollouts, rid, "refused")
    os.makedirs(folder, exist_ok=True)
    n = 1 + sum(1 for name in os.listdir(folder) if name.endswith(".json"))
    os.replace(path, os.path.join(folder, f"{n}.json"))
    if store._strict:
        for where in (folder, store._rollouts):
            _files.fsync_dir(where)
    store._touched()
    return f"rollouts/{rid}/refused/{n}.json"


def _refuse(
    store: Journal,
    row: dict[str, Any],
    path: str,
    record: dict[str, Any],
    why: str,
    findings: _Findings,
) -> None:
    rid = row["id"]
    moved = _set_aside(store, rid, path)
    claimed = {k: record.get(k) for k in ("status", "attempt", "reward")}
    store.event(
        "refused", id=rid, file=f"rollouts/{rid}.json", moved_to=moved, claimed=claimed, reason=why
    )
    findings.add(
        f"{store.path}: refused rollouts/{rid}.json (claims {claimed['status']}, reward "
        f"{claimed['reward']!r}): {why}; moved to {moved}, the rollout stays {row['status']}"
    )


def _unreadable(store: Journal, row: dict[str, Any], path: str, findings: _Findings) -> None:
    rid = row["id"]
    size = os.path.getsize(path)
    moved = _set_aside(store, rid, path)
    ended = row["status"] in _index.ENDED
    store.event(
        "recovered",
        id=rid,
        file=f"rollouts/{rid}.json",
        bytes=size,
        moved_to=moved,
        reason="not a JSON object (cut short or overwritten)",
        was=row["status"],
    )
    then = f"the rollout stays {row['status']}"
    if ended:
        _record_lost(store, row, moved)
        then = "its result is lost: recorded interrupted (--retry-errors runs it again)"
    findings.add(
        f"{store.path}: rollouts/{rid}.json is not a JSON object ({size} bytes, cut short "
        f"or overwritten); moved to {moved}, {then}"
    )


def _record_lost(store: Journal, row: dict[str, Any], moved: str) -> None:
    """Record an ended rollout whose record was unreadable as `interrupted`."""
    a = _Assignment(row["id"], row["task"], row["agent"], row["model"], row["repeat"])
    rec = RolloutRecorder(store, a, row["attempt"] or 1)
    rec.update(
        id=row["id"],
        task=row["task"],
        agent=row["agent"],
        model=row["model"],
        repeat=row["repeat"],
        attempt=row["attempt"] or 1,
        status="interrupted",
        phase=row["phase"],
        started_at=row["started_at"],
        ended_at=row["ended_at"],
        reward=None,
        cost=row["cost"],
        usage={"input_tokens": row["input_tokens"], "output_tokens": row["output_tokens"]},
        error={
            "phase": row["phase"],
            "type": "RecordLost",
            "message": f"its record was unreadable (moved to {moved}); it had ended "
            f"{row['status']}",
        },
    )


def _correct(
    store: Journal, rid: str, record: dict[str, Any], where: list[int] | None = None
) -> None:
    """A kill between writing the record and appending its event: index it now (with
    where the record is, for a segment line)."""
    fields = index_fields(record)
    event = {"t": time.time(), "type": "rollout", "id": rid, **fields}
    if where is not None:
        event["record"] = where
        fields.update(_index.location_fields(where))
    store._append_events(store._encode(event), {rid: fields})


def refuse_lost_history(root: str, *, has_events: bool) -> None:
    """Refuse a directory that lost both its event log and its index."""
    if not has_events and not os.path.exists(os.path.join(root, "index.sqlite")):
        raise StoreError(
            f"{root}: events.jsonl and index.sqlite are both missing; nothing is left to "
            "check its records against, so it cannot be resumed"
        )
