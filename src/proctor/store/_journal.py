"""`Journal`: the write side a `BatchStore` shares with its recorders and its recovery.

It holds the open output directory (its lock, `events.jsonl`, the index connection) and
the one path every write takes: encode (and redact), hand to the kernel, mark for the
next group commit, and commit the index behind the log. `BatchStore` adds opening,
closing and the background flush; `RolloutRecorder` and `_recover` write through this
class alone, so neither needs the store (no import circle).
"""

from __future__ import annotations

import fcntl
import os
import sqlite3
import threading
import time
from collections.abc import Callable, Mapping
from typing import Any, Literal

import orjson

from .._errors import StoreError
from . import _files, _index
from ._segments import Segments, read_line

__all__ = ["Durability", "IdFilter", "Journal", "Redact", "load_record", "lock_dir"]

Durability = Literal["default", "strict"]
Redact = Callable[[bytes], bytes]


class IdFilter:
    """A fixed-size set of strings that may answer "present" wrongly, never "absent"
    wrongly (a Bloom filter: three bits per id in 512 KiB, allocated on the first add).

    At 100,000 ids about 1 in 3,000 absent ids reads as present; at 1,000,000 about 1
    in 8. A wrong "present" costs the caller only a look at the index.
    """

    _BITS = 1 << 22
    _MASK = _BITS - 1

    def __init__(self) -> None:
        self._bits: bytearray | None = None

    def _positions(self, key: str) -> tuple[int, int, int]:
        h = hash(key) & 0xFFFF_FFFF_FFFF_FFFF
        step = (h >> 32) | 1
        mask = self._MASK
        return h & mask, (h + step) & mask, (h + 2 * step) & mask

    def add(self, key: str) -> None:
        """Remember `key`."""
        if self._bits is None:
            self._bits = bytearray(self._BITS >> 3)
        bits = self._bits
        for i in self._positions(key):
            bits[i >> 3] |= 1 << (i & 7)

    def __contains__(self, key: object) -> bool:
        bits = self._bits
        if bits is None or not isinstance(key, str):
            return False
        return all(bits[i >> 3] & (1 << (i & 7)) for i in self._positions(key))


class Journal:
    """An output directory open for writing: its event log, its index and its files.

    Calls are thread-safe; each returns once its bytes are with the kernel (and, in
    `strict` mode, on disk).
    """

    def __init__(
        self,
        path: str,
        batch: dict[str, Any],
        *,
        dir_fd: int,
        durability: Durability,
        redact: Redact | None,
    ) -> None:
        self.path = path
        self.batch = batch
        self.durability: Durability = durability
        self._strict = durability == "strict"
        self._redact = redact
        self._rollouts = os.path.join(path, "rollouts")
        self._lock = threading.Lock()
        self._db_lock = threading.Lock()
        self._pending: dict[str, dict[str, Any]] = {}
        self._committing: dict[str, dict[str, Any]] = {}
        self._dirty = False
        self._error: BaseException | None = None
        self._closed = False
        self._events_path = os.path.join(path, "events.jsonl")
        self._events_fd = os.open(
            self._events_path, os.O_WRONLY | os.O_APPEND | os.O_CREAT | os.O_CLOEXEC, 0o644
        )
        self._events_size = os.fstat(self._events_fd).st_size
        self._dir_fd = dir_fd
        self._db = _index.connect(os.path.join(path, "index.sqlite"), write=True)
        self._next_seq = self._db.execute(
            "SELECT COALESCE(MAX(seq) + 1, 0) FROM rollouts"
        ).fetchone()[0]
        self._committed = _index.get_offset(self._db)
        self._segments = Segments(self._rollouts, strict=self._strict)
        self._witnessed = _index.get_records_end(self._db)
        self._reader: sqlite3.Connection | None = None
        self._reader_lock = threading.Lock()
        # The rollouts given a record by this writer: when no other rollout has one (a
        # directory it created, or reopened before any began), a recorder asks the
        # index only about these (and a rare false positive). A filter, not a set of
        # ids: its size stays the same however many rollouts the batch records.
        self._written = IdFilter()
        self._recorded_before = False
        self._reopened = False

    def event(self, type: str, **data: Any) -> None:
        """Append a batch event (`{"t": time, "type": type, **data}`) to `events.jsonl`."""
        self._append_events(self._encode({"t": time.time(), "type": type, **data}), None)

    def flush(self) -> None:
        """Commit the index now; in `default` mode also sync the filesystem first."""
        self._check()
        self._commit(sync=not self._strict)

    # -- internals -----------------------------------------------------------------------

    def _encode(self, obj: Any) -> bytes:
        data = orjson.dumps(obj, default=str, option=orjson.OPT_APPEND_NEWLINE)
        return data if self._redact is None else self._redact(data)

    def _append_events(self, data: bytes, changes: Mapping[str, Mapping[str, Any]] | None) -> None:
        with self._lock:
            self._check()
            self._write_events(data)
            for rid, fields in (changes or {}).items():
                self._pending.setdefault(rid, {}).update(fields)

    def _append_record(self, rid: str, data: bytes, indexed: dict[str, Any]) -> None:
        """Append the record line `data` to the segment and then its `rollout` event
        (`indexed` and the record's location), under one lock: only the last line
        written can lack its event."""
        with self._lock:
            self._check()
            where = self._segments.append(data)
            event = {"t": time.time(), "type": "rollout", "id": rid, **indexed, "record": where}
            self._write_events(self._encode(event))
            self._witnessed = self._segments.end
            self._written.add(rid)
            pending = self._pending.setdefault(rid, {})
            pending.update(indexed)
            pending.update(_index.location_fields(where))

    def _write_events(self, data: bytes) -> None:
        """Hand `data` to `events.jsonl` (synced in `strict` mode); the caller holds `_lock`."""
        _files.write_all(self._events_fd, data)
        if self._strict:
            os.fsync(self._events_fd)
        else:
            self._dirty = True
        self._events_size += len(data)

    def _load_record(self, rid: str, legacy: str) -> tuple[dict[str, Any], bool]:
        """The rollout's current record ({} when none) and whether it came from its own
        file `legacy` (the layout before segments)."""
        if not self._recorded_before and rid not in self._written:
            return {}, False
        where = self._location(rid)
        if where is not None:
            return read_line(self._rollouts, where, rid) or {}, False
        record = load_record(legacy) if self._reopened else {}
        return record, bool(record)

    def _location(self, rid: str) -> tuple[int, int, int] | None:
        with self._lock:
            for changes in (self._pending, self._committing):
                fields = changes.get(rid)
                if fields is not None and "record_segment" in fields:
                    values = tuple(fields[k] for k in _index.LOCATION)
                    return None if None in values else values
        with self._reader_lock:
            if self._reader is None:
                self._reader = _index.connect(os.path.join(self.path, "index.sqlite"), write=False)
            return _index.location(self._reader, rid)

    def _touched(self) -> None:
        if not self._strict:
            self._dirty = True

    def _check(self) -> None:
        if self._error is not None:
            raise StoreError(
                f"the batch store's background flush failed: {self._error!r}"
            ) from self._error

    def _commit(self, *, sync: bool) -> None:
        # One committer at a time, and the capture inside the db lock, so a later
        # commit never lands before an earlier one. The sync comes first so the index
        # never claims events that a machine crash could still take back.
        with self._db_lock:
            with self._lock:
                pending, self._pending = self._pending, {}
                self._committing = pending  # (what `_location` still finds meanwhile)
                offset, dirty, witnessed = self._events_size, self._dirty, self._witnessed
                self._dirty = False
            try:
                if sync and dirty:
                    _files.sync_filesystem(self._dir_fd)
                if pending or offset != self._committed:
                    _index.apply_changes(self._db, pending, offset, witnessed)
                    self._committed = offset
            finally:
                with self._lock:
                    self._committing = {}

    def _close_handles(self, *, keep_lock: bool = False) -> None:
        os.close(self._events_fd)
        self._segments.close()
        if not keep_lock:
            os.close(self._dir_fd)
        self._db.close()
        with self._reader_lock:
            if self._reader is not None:
                self._reader.close()
                self._reader = None


def load_record(path: str) -> dict[str, Any]:
    """The JSON object in the file `path` ({} when missing or not one)."""
    try:
        with open(path, "rb") as f:
            record = orjson.loads(f.read())
    except (FileNotFoundError, orjson.JSONDecodeError):
        return {}
    return record if isinstance(record, dict) else {}


def lock_dir(path: str, durability: str) -> int:
    """Open the output directory and hold an exclusive lock on it while writing.

    Two writers would interleave their events and undo each other's index rows; the
    lock goes with the process, so a killed runner never blocks its resume.
    """
    if durability not in ("default", "strict"):
        raise ValueError(f"durability is 'default' or 'strict', not {durability!r}")
    fd = os.open(path, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        os.close(fd)
        raise StoreError(f"{path} is open for writing by another process") from None
    return fd
