"""Reading an output directory: what the dashboard, the report and resume look at.

Every function takes the output directory's path, opens what it needs and closes it,
and works while a runner is writing (SQLite WAL readers see the last commit; JSONL
readers stop before a line still being written).
"""

from __future__ import annotations

import dataclasses
import os
from typing import Any

import orjson

from . import _index
from ._files import JsonlReader
from ._journal import load_record
from ._query import RolloutQuery, select, where
from ._recorder import check_id
from ._segments import read_line, segment_name

__all__ = [
    "count_rollouts",
    "index_row",
    "list_rollouts",
    "locate_record",
    "read_events",
    "read_record",
    "read_rollout",
    "read_state",
    "recorded_cost",
]


def list_rollouts(
    path: str | os.PathLike[str], query: RolloutQuery | None = None, /, **fields: Any
) -> list[dict[str, Any]]:
    """One page of index rows, filtered and sorted (`RolloutQuery`).

    Give a `RolloutQuery`, or its fields as keywords (`list_rollouts(out, status=
    "failed", limit=None)`), or both (the keywords replace the query's fields). A row
    has `id`, `seq` (plan order), `task`, `agent`, `model`, `repeat`, `status`, `phase`,
    `attempt`, `reward`, `error_phase`, `error_type`, `cost`, `input_tokens`,
    `output_tokens`, `started_at`, `ended_at`.

    Raises:
        StoreError: `path` has no index, or a damaged one (`--resume` rebuilds it).
        ValueError: an unknown `order_by` column; TypeError: an unknown field.
    """
    sql, args = select(_query_of(query, fields))
    return _index.read(
        path,
        lambda db: [dict(zip(_index.COLUMNS, row, strict=True)) for row in db.execute(sql, args)],
    )


def count_rollouts(
    path: str | os.PathLike[str],
    query: RolloutQuery | None = None,
    /,
    *,
    by: str = "status",
    **fields: Any,
) -> dict[Any, int]:
    """How many rollouts match the query (its filters; no page), for each value of the
    column `by` (default status).

    Raises:
        StoreError: `path` has no index, or a damaged one (`--resume` rebuilds it).
        ValueError: an unknown column.
    """
    clause, args = where(_query_of(query, fields))
    return _index.read(path, lambda db: _index.count_rows(db, clause, args, by))


def _query_of(query: RolloutQuery | None, fields: dict[str, Any]) -> RolloutQuery:
    query = query or RolloutQuery()
    return dataclasses.replace(query, **fields) if fields else query


def read_rollout(path: str | os.PathLike[str], rollout_id: str) -> dict[str, Any]:
    """Everything recorded for one rollout.

    Keys: `record` (its line in a segment, or `rollouts/<id>.json` in a folder of
    layout 1; None before its first update or when it does not parse), `index`
    (its index row, or None), `model_turns`, `user_turns` and `trace` (the JSONL
    streams' records),
    `checkpoint` and `evaluation` (or None), `artifacts` (name -> SHA-256 from the
    manifest), `log` (text, or None), `attempts` (archived attempt numbers), and
    `torn` (file name -> bytes left out: a stream's torn last line, or a JSON file
    that does not parse, which only a machine crash can leave).

    Raises:
        StoreError: `path` has no index, or a damaged one (`--resume` rebuilds it).
        ValueError: `rollout_id` is not a rollout id (it could name a path elsewhere).
    """
    root = os.fspath(path)
    folder = os.path.join(root, "rollouts", check_id(rollout_id))
    torn: dict[str, int] = {}
    row, loc = _index.read(root, lambda db: _row_and_location(db, rollout_id))
    if loc is not None:
        record = read_line(os.path.join(root, "rollouts"), loc, rollout_id)
        if record is None:
            torn[f"rollouts/{segment_name(loc[0])}:{loc[1]}"] = loc[2]
    else:
        record = _json(os.path.join(root, "rollouts", f"{rollout_id}.json"), torn)
    out: dict[str, Any] = {"id": rollout_id, "record": record, "index": row, "torn": torn}
    for key in ("model_turns", "user_turns", "trace"):
        name = f"{key}.jsonl"
        reader = JsonlReader(os.path.join(folder, name))
        out[key] = list(reader)
        if reader.torn:
            torn[name] = reader.torn
    out["checkpoint"] = _json(os.path.join(folder, "checkpoint.json"), torn)
    out["evaluation"] = _json(os.path.join(folder, "evaluation", "status.json"), torn)
    out["artifacts"] = _manifest(os.path.join(folder, "artifacts", "SHA256SUMS"))
    out["log"] = _text(os.path.join(folder, "log.txt"))
    out["attempts"] = _attempts(os.path.join(folder, "attempts"))
    return out


def read_record(
    path: str | os.PathLike[str], rollout_id: str, *, attempt: int | None = None
) -> dict[str, Any]:
    """The rollout's record (the segment line the index points at, or in a folder of
    layout 1 `rollouts/<id>.json`), or with `attempt` that of an attempt a retry moved
    aside (`rollouts/<id>/attempts/<n>/rollout.json`); {} when there is none or it does
    not parse (`read_rollout` says which files were torn).

    Raises:
        StoreError: `path` has no index, or a damaged one (`--resume` rebuilds it).
        ValueError: `rollout_id` is not a rollout id (it could name a path elsewhere).
    """
    folder = os.path.join(os.fspath(path), "rollouts")
    if attempt is None:
        check_id(rollout_id)
        loc = _index.read_held(path, lambda db: _index.location(db, rollout_id))
        if loc is not None:
            return read_line(folder, loc, rollout_id) or {}
        return load_record(os.path.join(folder, f"{rollout_id}.json"))
    archived = os.path.join(folder, check_id(rollout_id), "attempts", str(int(attempt)))
    return load_record(os.path.join(archived, "rollout.json"))


def locate_record(path: str | os.PathLike[str], rollout_id: str) -> tuple[str, int, int] | None:
    """Where the rollout's record is: (segment file name in `rollouts/`, offset, length),
    or None when it has none in a segment (none yet, or its own `rollouts/<id>.json` in a
    folder of layout 1). For a reader that opens files its own way (the dashboard).

    Raises:
        StoreError: `path` has no index, or a damaged one (`--resume` rebuilds it).
    """
    loc = _index.read_held(path, lambda db: _index.location(db, rollout_id))
    return None if loc is None else (segment_name(loc[0]), loc[1], loc[2])


def read_events(path: str | os.PathLike[str], start: int = 0) -> JsonlReader:
    """The batch's events from byte `start`; after iterating, `.end` is where to resume."""
    return JsonlReader(os.path.join(os.fspath(path), "events.jsonl"), start)


def read_state(path: str | os.PathLike[str]) -> dict[str, Any] | None:
    """The last `batch-state.json` snapshot (counts and every assignment), or None."""
    state = _json(os.path.join(os.fspath(path), "batch-state.json"))
    return state if isinstance(state, dict) else None


def recorded_cost(path: str | os.PathLike[str]) -> float:
    """USD the index records over every rollout's current attempt (one SQL sum)."""
    sql = "SELECT COALESCE(SUM(cost), 0) FROM rollouts"
    return _index.read(path, lambda db: float(db.execute(sql).fetchone()[0]))


def index_row(path: str | os.PathLike[str], rollout_id: str) -> dict[str, Any] | None:
    """The rollout's index row, or None for an id the index does not know.

    Raises:
        StoreError: `path` has no index, or a damaged one.
    """
    sql = f"SELECT {', '.join(_index.COLUMNS)} FROM rollouts WHERE id=?"
    row = _index.read(path, lambda db: db.execute(sql, (rollout_id,)).fetchone())
    return None if row is None else dict(zip(_index.COLUMNS, row, strict=True))


def _row_and_location(
    db: Any, rollout_id: str
) -> tuple[dict[str, Any] | None, tuple[int, int, int] | None]:
    sql = f"SELECT {', '.join(_index.COLUMNS)} FROM rollouts WHERE id=?"
    row = db.execute(sql, (rollout_id,)).fetchone()
    if row is None:
        return None, None
    return dict(zip(_index.COLUMNS, row, strict=True)), _index.location(db, rollout_id)


def _json(file: str, torn: dict[str, int] | None = None) -> Any:
    try:
        with open(file, "rb") as f:
            data = f.read()
    except FileNotFoundError:
        return None
    try:
        return orjson.loads(data)
    except orjson.JSONDecodeError:
        # Only a machine crash in `default` mode on a filesystem that does not order
        # a rename after its data (ext4 does) leaves this: report, do not raise.
        if torn is not None:
            torn[os.path.basename(file)] = len(data)
        return None


def _text(file: str) -> str | None:
    try:
        with open(file, encoding="utf-8", errors="replace") as f:
            return f.read()
    except FileNotFoundError:
        return None


def _manifest(file: str) -> dict[str, str]:
    text = _text(file) or ""
    pairs = (line.split("  ", 1) for line in text.splitlines() if "  " in line)
    return {name: digest for digest, name in pairs}


def _attempts(folder: str) -> list[int]:
    try:
        names = os.listdir(folder)
    except FileNotFoundError:
        return []
    return sorted(int(n) for n in names if n.isdigit())
