"""A folder written in layout 1 (one `rollouts/<id>.json` per record, an index without
record locations), built here by hand as that proctor wrote it: every reader still
opens it, and a resume continues it in layout 2 (records in segments)."""

from __future__ import annotations

import sqlite3
import time
from pathlib import Path
from typing import Any

import orjson

import proctor.store as pstore
from proctor.batch import report
from proctor.samples import samples_from_batch
from proctor.store import BatchStore, count_rollouts, list_rollouts, read_events, read_rollout

# The index as layout 1 made it: no record_segment/_offset/_length columns.
V1_SCHEMA = """
CREATE TABLE rollouts (
    id TEXT PRIMARY KEY NOT NULL,
    seq INTEGER, task TEXT, agent TEXT, model TEXT, repeat INTEGER,
    status TEXT, phase TEXT, attempt INTEGER, reward REAL,
    error_phase TEXT, error_type TEXT, cost REAL,
    input_tokens INTEGER, output_tokens INTEGER, started_at REAL, ended_at REAL
);
CREATE TABLE meta (key TEXT PRIMARY KEY NOT NULL, value) WITHOUT ROWID;
"""
_COLUMNS = (
    *("seq", "task", "agent", "model", "repeat", "status", "phase", "attempt"),
    *("reward", "started_at", "ended_at"),
)


class _Assignment:
    def __init__(self, rid: str, task: str) -> None:
        self.rollout_id, self.task, self.agent, self.model, self.repeat = rid, task, "a", "m", 0


def _v1_folder(out: Path, done: int = 2, queued: int = 1) -> list[str]:
    """A layout-1 output folder: `done` completed rollouts with their record files and
    `queued` ones not begun; returns the ids in plan order."""
    (out / "rollouts").mkdir(parents=True)
    now = time.time()
    (out / "batch.json").write_bytes(orjson.dumps({"layout_version": 1, "created_at": now}))
    events, rows, ids = bytearray(), [], []
    for seq in range(done + queued):
        rid, task = f"t{seq}.a.r0", f"t{seq}"
        ids.append(rid)
        ident = {"seq": seq, "task": task, "agent": "a", "model": "m", "repeat": 0}
        events += orjson.dumps(
            {"t": now, "type": "assigned", "id": rid, **ident, "status": "queued"}
        )
        events += b"\n"
        row: dict[str, Any] = {**ident, "status": "queued"}
        if seq < done:
            ended = {"status": "completed", "phase": "done", "attempt": 1, "reward": 1.0}
            times = {"started_at": now, "ended_at": now + 1}
            events += orjson.dumps({"t": now, "type": "rollout", "id": rid, **ended, **times})
            events += b"\n"
            row.update(ended, **times)
            steps = [
                {"kind": "user", "content": f"say {seq}"},
                {"kind": "assistant", "content": "ok"},
            ]
            record = {"id": rid, **ident, **ended, **times, "trace": {"steps": steps}}
            record["result"] = {"grade": {"reward": 1.0, "is_error": False}, "evaluation": "ok"}
            (out / "rollouts" / f"{rid}.json").write_bytes(orjson.dumps(record) + b"\n")
        rows.append((rid, *(row.get(k) for k in _COLUMNS)))
    (out / "events.jsonl").write_bytes(bytes(events))
    db = sqlite3.connect(out / "index.sqlite", isolation_level=None)
    db.executescript(V1_SCHEMA)
    marks = ", ".join("?" * (len(_COLUMNS) + 1))
    db.executemany(f"INSERT INTO rollouts(id, {', '.join(_COLUMNS)}) VALUES({marks})", rows)
    db.execute("INSERT INTO meta VALUES('events_offset', ?)", (len(events),))
    db.close()
    return ids


def test_every_reader_opens_a_layout_1_folder(tmp_path: Path) -> None:
    out = tmp_path / "out"
    first, second, queued = _v1_folder(out)
    assert pstore.read_batch(out)["layout_version"] == 1
    assert count_rollouts(out) == {"completed": 2, "queued": 1}
    assert pstore.locate_record(out, first) is None
    record = pstore.read_record(out, first)
    assert record["id"] == first and record["reward"] == 1.0
    assert read_rollout(out, second)["record"]["trace"]["steps"][0]["content"] == "say 1"
    assert pstore.read_record(out, queued) == {}
    assert report(out)["totals"]["rollouts"] == 3
    assert [s.rollout_id for s in samples_from_batch(out)] == []  # no model turns
    assert list((out / "rollouts").iterdir())  # nothing was rewritten by reading
    assert pstore.read_batch(out)["layout_version"] == 1


def test_a_resumed_layout_1_folder_continues_in_segments(tmp_path: Path) -> None:
    out = tmp_path / "out"
    first, second, queued = _v1_folder(out)
    with BatchStore.open(out) as store:
        store.begin(_Assignment(queued, "t2")).finish("completed", phase="done", reward=0.5)
        retry = store.begin(_Assignment(second, "t1"), attempt=2)  # a retry of a v1 record
        retry.finish("failed", phase="agent", reward=None)
    assert pstore.read_batch(out)["layout_version"] == pstore.LAYOUT_VERSION == 2
    assert pstore.read_record(out, first)["reward"] == 1.0  # still its own file
    assert pstore.read_record(out, queued)["reward"] == 0.5  # a segment line
    assert pstore.locate_record(out, queued) is not None
    assert pstore.read_record(out, second)["status"] == "failed"
    assert pstore.read_record(out, second, attempt=1)["status"] == "completed"
    assert not (out / "rollouts" / f"{second}.json").exists()  # moved to attempts/1
    names = sorted(p.name for p in (out / "rollouts").iterdir())
    assert names == sorted([f"{first}.json", second, "segment-000.jsonl"])
    assert count_rollouts(out) == {"completed": 2, "failed": 1}


def test_resuming_a_layout_1_folder_still_refuses_a_forged_record_file(tmp_path: Path) -> None:
    out = tmp_path / "out"
    _first, _second, queued = _v1_folder(out)
    forged = {"id": queued, "attempt": 1, "status": "completed", "reward": 1.0}
    (out / "rollouts" / f"{queued}.json").write_bytes(orjson.dumps(forged))
    said: list[str] = []
    with BatchStore.open(out, warn=said.append):
        pass
    [refused] = [e for e in read_events(out) if e["type"] == "refused"]
    assert refused["id"] == queued and "never began" in refused["reason"]
    assert {r["id"]: r["status"] for r in list_rollouts(out)}[queued] == "queued"
    assert (out / "rollouts" / queued / "refused" / "1.json").exists()
    assert len(said) == 1
