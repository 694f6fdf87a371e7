"""`index.sqlite`: one row per rollout, a view of `events.jsonl` kept in SQLite (WAL).

The runner writes it in batched transactions; a dashboard or report reads it at the
same time (WAL lets readers see the last commit while a write is under way). The
`meta` table records how far into `events.jsonl` the rows reflect (`events_offset`),
so reopening after a crash replays only the tail, and the end of the last record line
those events witness (`records_end`, see `_segments`). Besides `COLUMNS`, a row holds
where its record is: `record_segment`, `record_offset`, `record_length` (NULL for a
record in its own file, the layout before segments, or none yet).
"""

from __future__ import annotations

import os
import sqlite3
import stat
import threading
from collections.abc import Callable, Mapping, Sequence
from typing import Any, TypeVar

import orjson

from .._errors import CorruptIndexError, StoreError

__all__ = [
    "COLUMNS",
    "ENDED",
    "FILTERABLE",
    "LOCATION",
    "SORTABLE",
    "CorruptIndexError",
    "apply_changes",
    "connect",
    "count_rows",
    "get_offset",
    "get_records_end",
    "is_corrupt",
    "known_ids",
    "location",
    "location_fields",
    "read",
    "read_held",
]

_T = TypeVar("_T")

COLUMNS = (
    "id",
    "seq",
    "task",
    "agent",
    "model",
    "repeat",
    "status",
    "phase",
    "attempt",
    "reward",
    "error_phase",
    "error_type",
    "cost",
    "input_tokens",
    "output_tokens",
    "started_at",
    "ended_at",
)
LOCATION = ("record_segment", "record_offset", "record_length")
"""The columns that place a row's record in a segment file (not in `COLUMNS`)."""
SORTABLE = frozenset(COLUMNS)
ENDED = frozenset({"completed", "failed", "interrupted"})
"""The statuses a rollout ends in (`TERMINAL` in `proctor.store`)."""
FILTERABLE = ("status", "task", "agent", "model", "phase", "error_phase", "attempt")

_SCHEMA = """
CREATE TABLE IF NOT EXISTS rollouts (
    id TEXT PRIMARY KEY NOT NULL,
    seq INTEGER, task TEXT, agent TEXT, model TEXT, repeat INTEGER,
    status TEXT, phase TEXT, attempt INTEGER, reward REAL,
    error_phase TEXT, error_type TEXT, cost REAL,
    input_tokens INTEGER, output_tokens INTEGER, started_at REAL, ended_at REAL,
    record_segment INTEGER, record_offset INTEGER, record_length INTEGER
);
CREATE INDEX IF NOT EXISTS rollouts_seq ON rollouts(seq);
CREATE INDEX IF NOT EXISTS rollouts_status ON rollouts(status, seq);
CREATE INDEX IF NOT EXISTS rollouts_task ON rollouts(task, seq);
CREATE INDEX IF NOT EXISTS rollouts_model ON rollouts(model, seq);
CREATE INDEX IF NOT EXISTS rollouts_reward ON rollouts(reward);
CREATE INDEX IF NOT EXISTS rollouts_cost ON rollouts(cost);
CREATE INDEX IF NOT EXISTS rollouts_ended ON rollouts(ended_at);
CREATE TABLE IF NOT EXISTS meta (key TEXT PRIMARY KEY NOT NULL, value) WITHOUT ROWID;
"""


def connect(path: str, *, write: bool) -> sqlite3.Connection:
    """Open the index; a writer creates the schema and turns WAL on.

    `synchronous=NORMAL` fsyncs only at checkpoints: the index is rebuilt from
    `events.jsonl` after a crash, so it need not be more durable than the log.
    Readers are `query_only` and wait up to 5 s for a checkpoint's lock.
    """
    db = sqlite3.connect(path, timeout=5.0, isolation_level=None, check_same_thread=False)
    if write:
        db.execute("PRAGMA journal_mode=WAL")
        db.execute("PRAGMA synchronous=NORMAL")
        db.executescript(_SCHEMA)
        have = {row[1] for row in db.execute("PRAGMA table_info(rollouts)")}
        for column in LOCATION:  # an index written before segments
            if column not in have:
                db.execute(f"ALTER TABLE rollouts ADD COLUMN {column} INTEGER")
    else:
        db.execute("PRAGMA query_only=1")
    return db


def is_corrupt(exc: sqlite3.Error) -> bool:
    """Whether SQLite raised because the file is damaged (not, say, busy or locked)."""
    code = getattr(exc, "sqlite_errorcode", None)
    if code is None:  # raised by the module itself, before SQLite answered
        return False
    return code & 0xFF in (sqlite3.SQLITE_CORRUPT, sqlite3.SQLITE_NOTADB)


def get_offset(db: sqlite3.Connection) -> int:
    """The byte offset into `events.jsonl` that the rows reflect."""
    row = db.execute("SELECT value FROM meta WHERE key='events_offset'").fetchone()
    return int(row[0]) if row else 0


def get_records_end(db: sqlite3.Connection) -> tuple[int, int]:
    """(segment, offset) just past the last record line the indexed events witness."""
    row = db.execute("SELECT value FROM meta WHERE key='records_end'").fetchone()
    if not row:
        return (0, 0)
    segment, _, offset = str(row[0]).partition(":")
    return int(segment), int(offset)


def location_fields(record: Any) -> dict[str, Any]:
    """The location columns an event's `record` ([segment, offset, length] or null) sets."""
    if isinstance(record, list) and len(record) == 3 and all(type(x) is int for x in record):
        return dict(zip(LOCATION, record, strict=True))
    return dict.fromkeys(LOCATION)


def location(db: sqlite3.Connection, rid: str) -> tuple[int, int, int] | None:
    """Where the rollout's record is in a segment (None: its own file, or no record;
    also for an index from before segments, which has no such columns)."""
    try:
        row = db.execute(
            f"SELECT {', '.join(LOCATION)} FROM rollouts WHERE id=?", (rid,)
        ).fetchone()
    except sqlite3.OperationalError as exc:
        if "no such column" in str(exc):
            return None
        raise
    if row is None or None in row:
        return None
    return int(row[0]), int(row[1]), int(row[2])


def known_ids(db: sqlite3.Connection, ids: Sequence[str]) -> set[str]:
    """Those of `ids` the index has a row for (one query, however many)."""
    rows = db.execute(
        "SELECT id FROM rollouts WHERE id IN (SELECT value FROM json_each(?))",
        (orjson.dumps(list(ids)).decode(),),
    )
    return {rid for (rid,) in rows}


def apply_changes(
    db: sqlite3.Connection,
    changes: Mapping[str, Mapping[str, Any]],
    offset: int,
    records_end: tuple[int, int] | None = None,
) -> None:
    """Upsert each rollout's changed columns and the events offset (and `records_end`),
    in one transaction.

    A change sets only the columns it names, so replaying an event twice is harmless.
    """
    by_shape: dict[tuple[str, ...], list[tuple[Any, ...]]] = {}
    for rid, fields in changes.items():
        keys = tuple(sorted(fields))
        by_shape.setdefault(keys, []).append((rid, *(fields[k] for k in keys)))
    db.execute("BEGIN IMMEDIATE")
    try:
        for keys, rows in by_shape.items():
            db.executemany(_upsert_sql(keys), rows)
        db.execute(
            "INSERT INTO meta(key, value) VALUES('events_offset', ?) "
            "ON CONFLICT(key) DO UPDATE SET value=excluded.value",
            (offset,),
        )
        if records_end is not None:
            db.execute(
                "INSERT INTO meta(key, value) VALUES('records_end', ?) "
                "ON CONFLICT(key) DO UPDATE SET value=excluded.value",
                (f"{records_end[0]}:{records_end[1]}",),
            )
    except BaseException:
        db.execute("ROLLBACK")
        raise
    db.execute("COMMIT")


def _upsert_sql(keys: Sequence[str]) -> str:
    cols = ", ".join(("id", *keys))
    marks = ", ".join("?" * (len(keys) + 1))
    if not keys:
        return "INSERT INTO rollouts(id) VALUES(?) ON CONFLICT(id) DO NOTHING"
    sets = ", ".join(f"{k}=excluded.{k}" for k in keys)
    return f"INSERT INTO rollouts({cols}) VALUES({marks}) ON CONFLICT(id) DO UPDATE SET {sets}"


def count_rows(
    db: sqlite3.Connection, where: str, args: Sequence[Any], group_by: str
) -> dict[Any, int]:
    """How many rows match the clause `where` (with `args`), by the value of `group_by`."""
    if group_by not in SORTABLE:
        raise ValueError(f"cannot group by {group_by!r}; one of {sorted(SORTABLE)}")
    sql = f"SELECT {group_by}, COUNT(*) FROM rollouts{where} GROUP BY {group_by}"
    return {key: n for key, n in db.execute(sql, list(args))}


def read(path: str | os.PathLike[str], fn: Callable[[sqlite3.Connection], _T]) -> _T:
    """`fn` on a read-only connection to the index of the output directory `path`.

    The index must be a regular file (a link is not followed: what a rollout wrote is
    not trusted). A damaged index is one line naming the commands that rebuild it (a
    reader never rebuilds it itself).

    Raises:
        StoreError: no `index.sqlite` (or a link); `CorruptIndexError`: a damaged one.
    """
    root, file, _ = _index_file(path)
    try:
        db = connect(file, write=False)
        try:
            return fn(db)
        finally:
            db.close()
    except sqlite3.DatabaseError as exc:
        raise _damaged(root, file, exc) from None


def read_held(path: str | os.PathLike[str], fn: Callable[[sqlite3.Connection], _T]) -> _T:
    """`read`, on a read-only connection kept open for the directory while its index is
    the same file: for a reader called once per rollout (`read_record`), whose query
    costs far less than opening a connection. Each call still sees the last commit."""
    root, file, key = _index_file(path)
    with _HELD_LOCK:
        held = _HELD.pop(file, None)
        if held is not None and held[0] != key:  # replaced (rebuilt): open the new one
            held[1].close()
            held = None
        try:
            if held is None:
                held = (key, connect(file, write=False))
            value = fn(held[1])
        except sqlite3.DatabaseError as exc:
            if held is not None:
                held[1].close()
            raise _damaged(root, file, exc) from None
        _HELD[file] = held  # (most recent last)
        while len(_HELD) > _HOLD:
            _HELD.pop(next(iter(_HELD)))[1].close()
        return value


_HELD: dict[str, tuple[tuple[int, int, int], sqlite3.Connection]] = {}
_HELD_LOCK = threading.Lock()
_HOLD = 4


def _index_file(path: str | os.PathLike[str]) -> tuple[str, str, tuple[int, int, int]]:
    root = os.fspath(path)
    file = os.path.join(root, "index.sqlite")
    try:
        st = os.lstat(file)
    except OSError:
        st = None
    if st is None or not stat.S_ISREG(st.st_mode):
        raise StoreError(
            f"{root} has no index.sqlite (links are not followed): not a batch output directory"
        )
    # (the change time too: a file deleted and made again may get the same inode)
    return root, file, (st.st_dev, st.st_ino, st.st_ctime_ns)


def _damaged(root: str, file: str, exc: sqlite3.DatabaseError) -> Exception:
    if not is_corrupt(exc):
        return exc
    return CorruptIndexError(
        f"{file} is damaged ({exc}): `proctor batch --resume {root}` or "
        f"`proctor batch report {root}` rebuilds it"
    )
