"""`BatchStore`: the crash-safe record of one batch (`_recorder` writes each rollout).

The layout it writes is documented in `proctor.store` and docs/batch-layout.md.

Who is the authority for what:

- the rollout's record (its line in `rollouts/segment-NNN.jsonl` that the index
  points at; `rollouts/<id>.json` in a folder of layout 1) for that rollout's state
  and result;
- `events.jsonl` for the batch's history, including every change of an indexed column;
- `index.sqlite` is a view of `events.jsonl`, committed in batches by a background
  thread and replayed from its recorded offset on reopen; `batch-state.json` is a
  periodic snapshot of the index.

Every call writes to the kernel before returning (no user-space buffering), so killing
the process loses nothing already handed over. Durability against a machine crash is
the `durability` mode: `strict` fsyncs before returning; `default` group-commits with
one `syncfs` per window (0.2 s), the same trade a database makes with a group commit.
"""

from __future__ import annotations

import os
import sqlite3
import threading
import time
from collections.abc import Iterable, Iterator, Mapping
from typing import Any

import orjson

from .._errors import StoreError
from . import _files, _index, _recover
from ._journal import Durability, Journal, Redact, lock_dir
from ._layout import LAYOUT_VERSION, TERMINAL, read_batch
from ._recorder import PlannedRollout, RolloutRecorder, check_id
from ._recover import Warn

__all__ = ["BatchStore"]

_REPLAY_CHUNK = 10_000
_ADD_CHUNK = 2_000  # (each chunk's rows, lines and index changes are alive at once)


_RESET = {"reward": None, "error": None, "usage": None, "cost": None, "ended_at": None}
_SNAPSHOT = (
    *("id", "task", "agent", "model", "repeat"),
    *("status", "phase", "attempt", "reward", "error_phase"),
)
_EVENT_COLUMNS = frozenset(_index.COLUMNS) - {"id"}


def _began_any(db: sqlite3.Connection) -> bool:
    """Whether any rollout began (only one that did can have a record)."""
    sql = "SELECT 1 FROM rollouts WHERE status IS NOT 'queued' LIMIT 1"
    return db.execute(sql).fetchone() is not None


class BatchStore(Journal):
    """The output directory of one batch, open for writing.

    Make one with `BatchStore.create` (a new directory) or `BatchStore.open` (resume).
    Calls are synchronous and thread-safe; each returns once its bytes are with the
    kernel (and, in `strict` mode, on disk). Use it as a context manager, or call
    `close()`, which commits and syncs everything and writes the final
    `batch-state.json`.
    """

    # -- opening and closing -------------------------------------------------------

    @classmethod
    def create(
        cls,
        path: str | os.PathLike[str],
        batch: Mapping[str, Any],
        *,
        durability: Durability = "default",
        redact: Redact | None = None,
        window: float = 0.2,
        snapshot_every: float = 2.0,
    ) -> BatchStore:
        """Create the output directory `path` and open it for writing.

        `batch` (the config as run, versions, pricing) becomes `batch.json` with
        `layout_version` and `created_at` added; it is written last and fsynced, so a
        directory without it is a creation that died. `redact` maps every JSON or text
        payload to what is written (e.g. to mask keys); `window` bounds the group commit
        in `default` mode; `snapshot_every` is the shortest period of `batch-state.json`.

        Raises:
            StoreError: `path` already exists.
        """
        root = os.path.abspath(os.fspath(path))
        os.makedirs(os.path.dirname(root), exist_ok=True)
        try:
            os.mkdir(root)
        except FileExistsError:
            raise StoreError(
                f"{root} already exists; a batch needs a new output directory"
            ) from None
        os.mkdir(os.path.join(root, "rollouts"))
        doc = {"layout_version": LAYOUT_VERSION, "created_at": time.time(), **batch}
        doc["layout_version"] = LAYOUT_VERSION  # first in the file, and never the caller's
        dir_fd = lock_dir(root, durability)
        store = cls(root, doc, dir_fd=dir_fd, durability=durability, redact=redact)
        _files.write_atomic(os.path.join(root, "batch.json"), store._encode(doc), sync=True)
        _files.fsync_dir(os.path.dirname(root))
        store._start_flushing(window, snapshot_every)
        return store

    @classmethod
    def open(
        cls,
        path: str | os.PathLike[str],
        *,
        durability: Durability = "default",
        redact: Redact | None = None,
        window: float = 0.2,
        snapshot_every: float = 2.0,
        rebuild_index: bool = False,
        warn: Warn | None = None,
    ) -> BatchStore:
        """Reopen an existing output directory to resume writing it.

        Cuts a torn last line off `events.jsonl`, replays the events the index had not
        committed, and holds every record against the event log: one the log does not
        back is refused (moved aside), an unreadable one is moved aside, and the rows
        of unfinished rollouts are corrected from their records (a kill between
        writing a record and its event). A corrupt index is rebuilt from the events
        (always, with `rebuild_index`), a lost event log restated from the index.
        Each finding is an event and a call of `warn` (default: a `warning:` line on
        stderr). Afterwards the index shows every rollout ever recorded;
        `list_rollouts` tells the executor what is left.

        Raises:
            StoreError: `path` is not a batch output of this layout version, another
                process has it open for writing, or it lost both its event log and
                its index (nothing is left to check its records against).
        """
        root = os.path.abspath(os.fspath(path))
        doc = read_batch(root)
        dir_fd = lock_dir(root, durability)
        say = warn or _recover.to_stderr
        args = (root, doc, dir_fd, durability, redact, say)
        try:
            events = os.path.join(root, "events.jsonl")
            has_events = os.path.exists(events)  # (before anything creates it)
            torn = _files.truncate_torn_tail(events)
            _recover.refuse_lost_history(root, has_events=has_events)
            try:
                store = cls._reopen(*args, has_events, torn, rebuild=rebuild_index)
            except sqlite3.DatabaseError as exc:
                if rebuild_index or not _index.is_corrupt(exc):
                    raise
                store = cls._reopen(*args, has_events, torn, rebuild=True, damage=str(exc))
        except sqlite3.DatabaseError as exc:
            os.close(dir_fd)
            raise _index.CorruptIndexError(
                f"{root}/index.sqlite is corrupt and could not be rebuilt: {exc}"
            ) from exc
        except BaseException:
            os.close(dir_fd)
            raise
        if doc.get("layout_version") != LAYOUT_VERSION:  # records go to segments from now
            doc["layout_version"] = LAYOUT_VERSION
            _files.write_atomic(os.path.join(root, "batch.json"), store._encode(doc), sync=True)
        store._start_flushing(window, snapshot_every)
        return store

    @classmethod
    def _reopen(
        cls,
        root: str,
        doc: dict[str, Any],
        dir_fd: int,
        durability: Durability,
        redact: Redact | None,
        warn: Warn,
        has_events: bool,
        torn: int,
        *,
        rebuild: bool,
        damage: str | None = None,
    ) -> BatchStore:
        if damage is None:
            damage = _recover.damaged_index(root)
        if damage is not None and not has_events:
            raise _index.CorruptIndexError(
                f"{root}/index.sqlite is corrupt and could not be rebuilt: events.jsonl "
                f"is missing ({damage})"
            )
        if damage is None and rebuild and os.path.exists(os.path.join(root, "index.sqlite")):
            damage = "rebuilt on request"  # (a missing index is rebuilt in any case)
        moved = None if damage is None else _recover.set_index_aside(root)
        store = cls(root, doc, dir_fd=dir_fd, durability=durability, redact=redact)
        store._reopened = True
        try:
            if damage is not None:
                store.event(
                    "recovered",
                    file="index.sqlite",
                    error=damage,
                    moved_to=moved,
                    rebuilt_from="events.jsonl",
                )
                warn(f"{root}/index.sqlite: {damage}; moved to {moved}, rebuilt from events.jsonl")
            store._replay(warn)
            store._recorded_before = True  # (what the checks below write is read back)
            _recover.check_records(store, warn)
            if torn:
                store.event("recovered", file="events.jsonl", torn_bytes=torn)
            store.flush()
            store._recorded_before = _began_any(store._db)
        except BaseException:
            store._close_handles(keep_lock=True)
            raise
        return store

    def _start_flushing(self, window: float, snapshot_every: float) -> None:
        """Start the background flush: a group commit every `window` seconds, and
        `batch-state.json` at most every `snapshot_every` seconds."""
        self._window = window
        self._snapshot_every = snapshot_every
        self._next_snapshot = 0.0
        self._stop = threading.Event()
        self._thread = threading.Thread(
            target=self._flush_loop, name="proctor-batch-store", daemon=True
        )
        self._thread.start()

    def close(self) -> None:
        """Commit the index, write `batch-state.json`, sync everything, release files.

        Raises:
            StoreError: the background flush had failed (its error is the cause).
        """
        if self._closed:
            return
        self._closed = True
        self._stop.set()
        if self._thread.is_alive():
            self._thread.join()
        try:
            self._check()
            self._commit(sync=False)
            self._snapshot()
            self._db.execute("PRAGMA wal_checkpoint(TRUNCATE)")
            if not self._strict:
                _files.sync_filesystem(self._dir_fd)
        finally:
            self._close_handles()

    def __enter__(self) -> BatchStore:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()

    # -- writing ---------------------------------------------------------------------

    def add_assignments(self, assignments: Iterable[PlannedRollout]) -> int:
        """Record planned rollouts as `queued`, in plan order (one `assigned` event each).

        An id the index already has is skipped, so a resumed runner may pass the whole
        plan again without requeueing what ran. Returns how many were added.

        Raises:
            ValueError: an id is not a plain name.
        """
        self.flush()
        added = 0
        chunk: dict[str, PlannedRollout] = {}
        for a in assignments:
            chunk.setdefault(a.rollout_id, a)
            if len(chunk) == _ADD_CHUNK:
                added += self._add_chunk(chunk)
                chunk = {}
        return added + (self._add_chunk(chunk) if chunk else 0)

    def _add_chunk(self, chunk: dict[str, PlannedRollout]) -> int:
        # The index (the previous chunk committed) says which ids it has: a set of the
        # plan's ids would hold every one of them until the last chunk.
        with self._db_lock:  # (the background flush commits on this connection)
            known = _index.known_ids(self._db, list(chunk))
        now = time.time()
        # One bytearray, not a list of encoded lines: each orjson result holds a page
        # of heap until freed, so thousands of them alive at once would cost MBs.
        lines = bytearray()
        changes = {}
        for rid, a in chunk.items():
            if rid in known:
                continue
            fields = {
                "seq": self._next_seq,
                "task": a.task,
                "agent": a.agent,
                "model": a.model,
                "repeat": a.repeat,
                "status": "queued",
            }
            self._next_seq += 1
            changes[check_id(rid)] = fields
            lines += self._encode({"t": now, "type": "assigned", "id": rid, **fields})
        if changes:
            self._append_events(bytes(lines), changes)
            self.flush()
        return len(changes)

    def amend(self, assignment: PlannedRollout, **fields: Any) -> None:
        """Merge `fields` into an ended rollout's record and index (what is known only
        once its group ended: group rewards, advantage, a reward they changed).

        Raises:
            StoreError: the rollout has not ended.
        """
        rec = RolloutRecorder(self, assignment, 0)
        if rec.record.get("status") not in TERMINAL:
            raise StoreError(f"rollout {rec.id} has not ended; only an ended record is amended")
        rec.update(**fields)

    def begin(
        self, assignment: PlannedRollout, *, attempt: int = 1, **fields: Any
    ) -> RolloutRecorder:
        """Start (or continue) recording one rollout and return its recorder.

        A rollout with no record starts `running` in phase `provisioning` (override with
        `status=` / `phase=`), with `started_at` now. One whose record has this
        `attempt` is continued from that record (a resumed rollout). One whose record
        has an earlier attempt has that attempt moved, with its files, to
        `rollouts/<id>/attempts/<n>/` and starts afresh.

        Raises:
            StoreError: this attempt of the rollout already ended (it is never redone).
            ValueError: the id is not a plain name.
        """
        rec = RolloutRecorder(self, assignment, attempt)
        fields.setdefault("status", "running")
        if rec.record.get("attempt") == attempt:
            if rec.record.get("status") in TERMINAL:
                raise StoreError(
                    f"rollout {rec.id} attempt {attempt} already ended "
                    f"({rec.record['status']}); a retry is attempt {attempt + 1}"
                )
            rec.update(**fields)
            return rec
        if rec.record or attempt > 1:
            if rec.record:
                rec.archive()
            fields = {**_RESET, **fields}  # the index row must not keep the old outcome
        fields.setdefault("phase", "provisioning")
        fields.setdefault("started_at", time.time())
        rec.record = {"id": rec.id}
        fields = {
            "task": assignment.task,
            "agent": assignment.agent,
            "model": assignment.model,
            "repeat": assignment.repeat,
            "attempt": attempt,
            **fields,
        }
        # The record file waits for the rollout's next update: until then the event
        # holds all it would say, and a trivial rollout creates one file, not two.
        rec.update(write=False, **fields)
        return rec

    def _flush_loop(self) -> None:
        while not self._stop.wait(self._window):
            try:
                self._commit(sync=not self._strict)
                if time.monotonic() >= self._next_snapshot:
                    self._snapshot()
            except BaseException as exc:  # surfaced by the next call on the store
                self._error = exc
                return

    def _snapshot(self) -> None:
        started = time.monotonic()
        target = os.path.join(self.path, "batch-state.json")
        _files.write_atomic_chunks(target, self._snapshot_chunks(), sync=self._strict)
        self._touched()
        # A snapshot costs O(rollouts): spacing them by 20x their cost keeps the
        # total under 5% of the run however large the batch grows.
        elapsed = time.monotonic() - started
        self._next_snapshot = time.monotonic() + max(self._snapshot_every, 20 * elapsed)

    def _snapshot_chunks(self) -> Iterator[bytes]:
        # Its own connection and one read transaction: counts and rows agree, and the
        # writer's commits go on meanwhile (WAL).
        reader = _index.connect(os.path.join(self.path, "index.sqlite"), write=False)
        try:
            reader.execute("BEGIN")
            counts = _index.count_rows(reader, "", (), "status")
            head = {"layout_version": LAYOUT_VERSION, "updated_at": time.time(), "counts": counts}
            yield self._encode(head)[:-2] + b',"rollouts":[\n'
            rows = reader.execute(f"SELECT {', '.join(_SNAPSHOT)} FROM rollouts ORDER BY seq")
            sep = b""
            while batch := rows.fetchmany(2000):
                part = bytearray(sep)
                for r in batch:
                    row = {k: v for k, v in zip(_SNAPSHOT, r, strict=True) if v is not None}
                    part += orjson.dumps(row)
                    part += b",\n"
                yield bytes(part[:-2])
                sep = b",\n"
            yield b"\n]}\n"
        finally:
            reader.close()

    def _replay(self, warn: _recover.Warn) -> None:
        offset = _index.get_offset(self._db)
        lost = max(0, offset - self._events_size)
        if lost:
            offset = 0  # the index outlived the log's tail: replay all there is
        reader = _files.JsonlReader(self._events_path, offset)
        changes: dict[str, dict[str, Any]] = {}
        witnessed = (0, 0) if offset == 0 else self._witnessed
        for ev in reader:
            rid = ev.get("id")
            if ev.get("type") in ("assigned", "rollout") and isinstance(rid, str):
                change = changes.setdefault(rid, {})
                change.update((k, v) for k, v in ev.items() if k in _EVENT_COLUMNS)
                if "record" in ev:
                    where = _index.location_fields(ev["record"])
                    change.update(where)
                    if where["record_segment"] is not None:
                        end = (
                            where["record_segment"],
                            where["record_offset"] + where["record_length"],
                        )
                        witnessed = max(witnessed, end)
            if len(changes) >= _REPLAY_CHUNK:
                _index.apply_changes(self._db, changes, reader.end, witnessed)
                changes = {}
        _index.apply_changes(self._db, changes, reader.end, witnessed)
        self._witnessed = witnessed
        self._committed = reader.end
        self._next_seq = self._db.execute(
            "SELECT COALESCE(MAX(seq) + 1, 0) FROM rollouts"
        ).fetchone()[0]
        if lost:
            _recover.restate_lost_log(self, lost, warn)
