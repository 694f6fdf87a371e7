"""The batch store: atomic, append-only, resumable, durable per mode, readable while written."""

from __future__ import annotations

import hashlib
import os
import random
import signal
import subprocess
import sys
import threading
import time
from dataclasses import dataclass
from pathlib import Path

import orjson
import pytest

import proctor.batch
import proctor.store as pstore
from proctor import StoreError
from proctor.store import (
    BatchStore,
    JsonlReader,
    _files,
    count_rollouts,
    list_rollouts,
    read_events,
    read_rollout,
    read_state,
)


@dataclass(frozen=True)
class Assignment:
    rollout_id: str
    task: str
    agent: str | None = None
    model: str | None = None
    repeat: int = 0


TRIVIAL_TRACE = {
    "steps": [{"kind": "user", "content": "Say hi"}, {"kind": "assistant", "content": "hi"}]
}


def _assignments(n: int, model: str = "m") -> list[Assignment]:
    return [Assignment(f"t{i:04d}.a.r0", f"t{i:04d}", "scripted", model, 0) for i in range(n)]


def _trivial(store: BatchStore, a: Assignment, reward: float = 1.0) -> None:
    rec = store.begin(a)
    rec.finish(
        "completed", phase="done", reward=reward, result={"reward": reward}, trace=TRIVIAL_TRACE
    )


def _files_under(root: Path) -> list[str]:
    return sorted(str(p.relative_to(root)) for p in root.rglob("*"))


def _run_child(code: str, out: Path) -> subprocess.Popen[bytes]:
    return subprocess.Popen(
        [sys.executable, "-c", code, str(out)], stdout=subprocess.PIPE, stderr=subprocess.PIPE
    )


def _kill(proc: subprocess.Popen[bytes]) -> None:
    if proc.poll() is None:
        proc.send_signal(signal.SIGKILL)
    proc.wait()
    for stream in (proc.stdout, proc.stderr):
        if stream is not None:
            stream.close()


# -- creating and reopening ------------------------------------------------------------


def test_creating_over_an_existing_directory_is_refused(tmp_path: Path) -> None:
    (tmp_path / "out").mkdir()
    with pytest.raises(StoreError, match="already exists"):
        BatchStore.create(tmp_path / "out", {})
    assert list((tmp_path / "out").iterdir()) == []


def test_reopening_something_that_is_not_a_batch_output_is_refused(tmp_path: Path) -> None:
    with pytest.raises(StoreError, match=r"no batch\.json"):
        BatchStore.open(tmp_path)
    with BatchStore.create(tmp_path / "out", {}):
        pass
    doc = orjson.loads((tmp_path / "out" / "batch.json").read_bytes())
    (tmp_path / "out" / "batch.json").write_bytes(orjson.dumps({**doc, "layout_version": 99}))
    with pytest.raises(StoreError, match="layout_version 99"):
        BatchStore.open(tmp_path / "out")


def test_one_writer_at_a_time(tmp_path: Path) -> None:
    out = tmp_path / "out"
    with BatchStore.create(out, {}):
        with pytest.raises(StoreError, match="open for writing by another process"):
            BatchStore.open(out)
        assert count_rollouts(out) == {}  # readers need no lock
    with BatchStore.open(out):
        pass


def test_a_new_batch_writes_its_config_once_with_the_layout_version(tmp_path: Path) -> None:
    config = {"config": {"max_concurrency": 4}, "layout_version": 0}
    with BatchStore.create(tmp_path / "out", config) as store:
        assert store.batch["layout_version"] == pstore.LAYOUT_VERSION
    doc = pstore.read_batch(tmp_path / "out")
    assert doc["config"] == {"max_concurrency": 4}
    assert doc["layout_version"] == pstore.LAYOUT_VERSION
    assert _files_under(tmp_path / "out") == [
        "batch-state.json",
        "batch.json",
        "events.jsonl",
        "index.sqlite",
        "rollouts",
    ]


# -- what a rollout leaves on disk ---------------------------------------------------------


def test_a_trivial_rollout_is_one_segment_line_and_no_folder(tmp_path: Path) -> None:
    out = tmp_path / "out"
    with BatchStore.create(out, {}) as store:
        [a, b] = _assignments(2)
        store.add_assignments([a, b])
        _trivial(store, a, reward=0.5)
        _trivial(store, b)
    assert _files_under(out / "rollouts") == ["segment-000.jsonl"]
    lines = (out / "rollouts" / "segment-000.jsonl").read_bytes().splitlines(keepends=True)
    assert [orjson.loads(line)["id"] for line in lines] == [a.rollout_id, b.rollout_id]
    [ended] = [e for e in read_events(out) if e.get("id") == b.rollout_id and "record" in e]
    assert ended["record"] == [0, len(lines[0]), len(lines[1])]  # where the index says
    assert pstore.locate_record(out, b.rollout_id) == ("segment-000.jsonl", *ended["record"][1:])
    record = pstore.read_record(out, a.rollout_id)
    assert record == orjson.loads(lines[0]) == read_rollout(out, a.rollout_id)["record"]
    assert record["status"] == "completed"
    assert record["reward"] == 0.5
    assert record["trace"] == TRIVIAL_TRACE
    assert record["attempt"] == 1
    assert record["ended_at"] >= record["started_at"]


def test_a_rollouts_folder_holds_only_the_files_it_used(tmp_path: Path) -> None:
    out = tmp_path / "out"
    [a] = _assignments(1)
    with BatchStore.create(out, {}) as store:
        rec = store.begin(a)
        rec.append_turn({"usage": {"input_tokens": 10, "output_tokens": 2}, "cost": 0.01})
        rec.append_turn({"usage": {"input_tokens": 12, "output_tokens": 3}, "cost": 0.02})
        rec.save_checkpoint({"messages": ["hi"]})
        digest = rec.add_artifact("answer.txt", b"42\n")
        rec.log("server started\n")
        rec.finish(
            "completed", reward=1.0, usage={"input_tokens": 22, "output_tokens": 5}, cost=0.03
        )
    assert _files_under(out / "rollouts" / a.rollout_id) == [
        "artifacts",
        "artifacts/SHA256SUMS",
        "artifacts/answer.txt",
        "checkpoint.json",
        "log.txt",
        "model_turns.jsonl",
    ]
    assert digest == hashlib.sha256(b"42\n").hexdigest()
    got = read_rollout(out, a.rollout_id)
    assert len(got["model_turns"]) == 2
    assert got["checkpoint"] == {"messages": ["hi"]}
    assert got["artifacts"] == {"answer.txt": digest}
    assert got["log"] == "server started\n"
    assert got["evaluation"] is None and got["trace"] == [] and got["attempts"] == []
    assert got["index"]["input_tokens"] == 22 and got["index"]["cost"] == 0.03


def test_artifact_names_and_rollout_ids_cannot_leave_their_folder(tmp_path: Path) -> None:
    with BatchStore.create(tmp_path / "out", {}) as store:
        with pytest.raises(ValueError):
            store.begin(Assignment("../escape", "t"))
        rec = store.begin(Assignment("ok", "t"))
        for name in ("../x", "a/b", "..", "SHA256SUMS"):
            with pytest.raises(ValueError):
                rec.add_artifact(name, b"")
        rec.finish("completed")
    with pytest.raises(ValueError):
        read_rollout(tmp_path / "out", "../../etc")


def test_a_retry_moves_the_earlier_attempt_aside_whole(tmp_path: Path) -> None:
    out = tmp_path / "out"
    [a] = _assignments(1)
    with BatchStore.create(out, {}) as store:
        rec = store.begin(a)
        rec.log("first try\n")
        rec.finish("failed", phase="agent", error={"phase": "agent", "type": "X", "message": "m"})
        with pytest.raises(StoreError, match="already ended"):
            store.begin(a)  # an ended attempt is never redone
        retry = store.begin(a, attempt=2)
        retry.finish("completed", reward=1.0)
    got = read_rollout(out, a.rollout_id)
    assert got["record"]["attempt"] == 2 and got["record"]["status"] == "completed"
    assert got["attempts"] == [1]
    old = out / "rollouts" / a.rollout_id / "attempts" / "1"
    assert orjson.loads((old / "rollout.json").read_bytes())["attempt"] == 1
    assert (old / "log.txt").read_text() == "first try\n"
    assert got["index"]["attempt"] == 2 and got["index"]["error_phase"] is None


def test_redact_sees_every_payload_before_it_is_written(tmp_path: Path) -> None:
    secret = b"sk-FAKE-0123456789"
    out = tmp_path / "out"
    with BatchStore.create(
        out, {"env": secret.decode()}, redact=lambda data: data.replace(secret, b"[redacted]")
    ) as store:
        rec = store.begin(Assignment("r", "t"))
        rec.append_turn({"request": {"key": secret.decode()}})
        rec.log(f"key={secret.decode()}\n")
        rec.save_checkpoint({"k": secret.decode()})
        store.event("note", text=secret.decode())
        rec.finish("completed", prompt=secret.decode())
    for file in out.rglob("*"):
        if file.is_file():
            assert secret not in file.read_bytes(), file


# -- JSONL: append-only, torn tails --------------------------------------------------------------


def test_a_torn_last_line_is_not_read_and_is_reported(tmp_path: Path) -> None:
    file = tmp_path / "x.jsonl"
    file.write_bytes(b'{"a":1}\n\n[1,2]\n{"a":2}\n{"a":3, "b": "hal')
    reader = JsonlReader(file)
    assert list(reader) == [{"a": 1}, {"a": 2}]
    assert reader.torn == len(b'{"a":3, "b": "hal')
    assert reader.corrupt == 1
    assert reader.end == len(b'{"a":1}\n\n[1,2]\n{"a":2}\n')
    with file.open("ab") as f:
        f.write(b'f"}\n{"a":4}\n')
    tail = JsonlReader(file, reader.end)
    assert list(tail) == [{"a": 3, "b": "half"}, {"a": 4}]
    assert tail.torn == 0


def test_reopening_cuts_a_torn_event_line_so_the_next_event_is_whole(tmp_path: Path) -> None:
    out = tmp_path / "out"
    with BatchStore.create(out, {}) as store:
        store.event("one")
    with (out / "events.jsonl").open("ab") as f:
        f.write(b'{"t":1,"type":"tw')
    with BatchStore.open(out) as store:
        store.event("two")
    reader = read_events(out)
    types = [e["type"] for e in reader]
    assert types == ["one", "recovered", "two"]
    assert reader.torn == 0 and reader.corrupt == 0


def test_a_resumed_rollout_cuts_a_torn_stream_line_before_appending(tmp_path: Path) -> None:
    out = tmp_path / "out"
    [a] = _assignments(1)
    with BatchStore.create(out, {}) as store:
        rec = store.begin(a)
        rec.append_turn({"n": 1})
        rec.update(phase="agent")
    with (out / "rollouts" / a.rollout_id / "model_turns.jsonl").open("ab") as f:
        f.write(b'{"n": 2, "us')
    assert read_rollout(out, a.rollout_id)["torn"] == {"model_turns.jsonl": len(b'{"n": 2, "us')}
    with BatchStore.open(out) as store:
        rec = store.begin(a)
        assert rec.record["phase"] == "agent"
        rec.append_turn({"n": 2})
        rec.finish("completed")
    got = read_rollout(out, a.rollout_id)
    assert got["model_turns"] == [{"n": 1}, {"n": 2}] and got["torn"] == {}


def test_a_stream_written_before_the_first_update_is_continued_whole(tmp_path: Path) -> None:
    out = tmp_path / "out"
    [a] = _assignments(1)
    with BatchStore.create(out, {}) as store:
        store.begin(a).append_turn({"n": 1})  # no update: no record file yet
    assert not (out / "rollouts" / f"{a.rollout_id}.json").exists()
    with (out / "rollouts" / a.rollout_id / "model_turns.jsonl").open("ab") as f:
        f.write(b'{"n": 2, "us')
    with BatchStore.open(out) as store:
        rec = store.begin(a)
        rec.append_turn({"n": 2})
        rec.finish("completed")
    assert read_rollout(out, a.rollout_id)["model_turns"] == [{"n": 1}, {"n": 2}]


# -- kill -9 and resume --------------------------------------------------------------------------

_WRITER = """
import sys
from types import SimpleNamespace
from proctor.store import BatchStore
def Assignment(rid, task):
    return SimpleNamespace(rollout_id=rid, task=task, agent=None, model=None, repeat=0)
store = BatchStore.create(sys.argv[1], {}, window=0.05)
store.add_assignments([Assignment(f"r{i}", "t") for i in range(20000)])
print("ready", flush=True)
i = 0
while True:
    a = Assignment(f"r{i}", "t")
    rec = store.begin(a)
    rec.update(phase="agent", blob="x" * (i % 5000))
    rec.append_turn({"i": i, "pad": "y" * (i % 3000)})
    rec.finish("completed", reward=float(i))
    print(i, flush=True)
    i += 1
"""


def _last_ack(proc: subprocess.Popen[bytes], seen: int) -> int:
    assert proc.stdout is not None
    lines = proc.stdout.read().split()
    return int(lines[-1]) if lines else seen


@pytest.mark.parametrize("trial", range(5))
def test_kill_9_of_the_writer_loses_nothing_it_was_handed(tmp_path: Path, trial: int) -> None:
    out = tmp_path / "out"
    proc = _run_child(_WRITER, out)
    try:
        assert proc.stdout is not None
        assert proc.stdout.readline().strip() == b"ready", proc.stderr.read() if proc.stderr else ""
        assert proc.stdout.readline().strip() == b"0"  # under load too, the kill comes later
        time.sleep(random.Random(trial).uniform(0.0, 0.5))
        proc.send_signal(signal.SIGKILL)
        proc.wait()
        last = _last_ack(proc, seen=0)
    finally:
        _kill(proc)
    with BatchStore.open(out) as store:
        done = list_rollouts(store.path, status="completed", limit=None)
    # Every acknowledged rollout is complete in the index, its record and its stream;
    # at most the one in flight at the kill is also there.
    assert last + 1 <= len(done) <= last + 2
    assert [r["reward"] for r in done] == [float(i) for i in range(len(done))]
    for i in range(len(done)):
        got = read_rollout(out, f"r{i}")
        assert got["record"]["status"] == "completed" and got["record"]["reward"] == float(i)
        assert got["model_turns"] == [{"i": i, "pad": "y" * (i % 3000)}]
    # The segment holds whole lines only (the reopen cut a line the kill tore).
    for line in (out / "rollouts" / "segment-000.jsonl").read_bytes().splitlines():
        orjson.loads(line)


def test_records_roll_over_to_the_next_segment(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from proctor.store import _segments

    monkeypatch.setattr(_segments, "SEGMENT_BYTES", 600)
    out = tmp_path / "out"
    plan = _assignments(6)
    with BatchStore.create(out, {}) as store:
        store.add_assignments(plan)
        for a in plan[:4]:
            _trivial(store, a)
    with BatchStore.open(out) as store:  # continues in the last segment, then rolls
        for a in plan[4:]:
            _trivial(store, a)
    names = sorted(p.name for p in (out / "rollouts").iterdir())
    assert len(names) >= 3 and names[:2] == ["segment-000.jsonl", "segment-001.jsonl"]
    for i, a in enumerate(plan):
        where = pstore.locate_record(out, a.rollout_id)
        assert where is not None and where[0] in names
        assert pstore.read_record(out, a.rollout_id)["reward"] == 1.0, i
    with BatchStore.open(out, warn=pytest.fail):  # nothing to find past records_end
        pass


def test_a_resumed_runner_can_pass_the_whole_plan_again(tmp_path: Path) -> None:
    out = tmp_path / "out"
    plan = _assignments(6)
    with BatchStore.create(out, {}) as store:
        assert store.add_assignments(plan[:4]) == 4
        for a in plan[:2]:
            _trivial(store, a)
    with BatchStore.open(out) as store:
        assert store.add_assignments(plan) == 2
        extra = store.begin(Assignment("adhoc", "t9", "cmd", "m9", 3))
        extra.finish("completed")
    rows = list_rollouts(out, limit=None)
    assert [(r["id"], r["seq"], r["status"]) for r in rows] == [("adhoc", None, "completed")] + [
        (a.rollout_id, i, "completed" if i < 2 else "queued") for i, a in enumerate(plan)
    ]
    assert rows[0]["task"] == "t9" and rows[0]["model"] == "m9" and rows[0]["repeat"] == 3


def test_reopen_corrects_the_index_from_a_record_whose_event_never_came(tmp_path: Path) -> None:
    out = tmp_path / "out"
    [a, b] = _assignments(2)
    with BatchStore.create(out, {}) as store:
        store.add_assignments([a, b])
        rec = store.begin(a)
        rec.update(phase="agent")
    # As if killed between appending the record and appending its event:
    segment = out / "rollouts" / "segment-000.jsonl"
    size = segment.stat().st_size
    record = {**pstore.read_record(out, a.rollout_id), "status": "completed", "reward": 1.0}
    with segment.open("ab") as f:
        f.write(orjson.dumps({**record, "phase": "done"}) + b"\n")
    with BatchStore.open(out):
        pass
    rows = {r["id"]: r for r in list_rollouts(out)}
    assert rows[a.rollout_id]["status"] == "completed" and rows[a.rollout_id]["reward"] == 1.0
    assert rows[b.rollout_id]["status"] == "queued"
    assert pstore.locate_record(out, a.rollout_id) == (
        segment.name,
        size,
        len(segment.read_bytes()) - size,
    )
    assert pstore.read_record(out, a.rollout_id)["phase"] == "done"


def test_reopen_cuts_a_torn_record_line_whose_event_never_came(tmp_path: Path) -> None:
    out = tmp_path / "out"
    [a] = _assignments(1)
    with BatchStore.create(out, {}) as store:
        store.add_assignments([a])
        store.begin(a).update(phase="agent")
    segment = out / "rollouts" / "segment-000.jsonl"
    whole = segment.read_bytes()
    with segment.open("ab") as f:
        f.write(b'{"id": "t0000.a.r0", "status": "compl')  # killed mid-write
    with BatchStore.open(out) as store:
        store.begin(a).finish("completed", reward=1.0)
    [ev] = [e for e in read_events(out) if e["type"] == "recovered"]
    assert ev["file"] == "rollouts/segment-000.jsonl" and ev["torn_bytes"] == 37
    assert segment.read_bytes().startswith(whole + b'{"id":"t0000.a.r0"')
    assert pstore.read_record(out, a.rollout_id)["reward"] == 1.0
    assert count_rollouts(out) == {"completed": 1}


def test_reopen_rebuilds_a_lost_index_from_the_events(tmp_path: Path) -> None:
    out = tmp_path / "out"
    with BatchStore.create(out, {}) as store:
        store.add_assignments(_assignments(30))
        for a in _assignments(30)[:20]:
            _trivial(store, a)
    before = list_rollouts(out, limit=None)
    for name in ("index.sqlite", "index.sqlite-wal", "index.sqlite-shm"):
        (out / name).unlink(missing_ok=True)
    with BatchStore.open(out):
        pass
    assert list_rollouts(out, limit=None) == before
    assert count_rollouts(out) == {"completed": 20, "queued": 10}


def test_reopen_refuses_records_the_events_do_not_back(tmp_path: Path) -> None:
    out = tmp_path / "out"
    [a, b, c] = _assignments(3)
    with BatchStore.create(out, {}) as store:
        store.add_assignments([a, b, c])
        store.begin(b).update(phase="agent")
    segment = out / "rollouts" / "segment-000.jsonl"
    started = pstore.read_record(out, b.rollout_id)
    claims = {"status": "completed", "reward": 1.0, "phase": "done"}
    forged = orjson.dumps({**started, "id": a.rollout_id, "task": a.task, **claims})  # never began
    later = orjson.dumps({**started, "started_at": started["started_at"] - 1, **claims})
    size = segment.stat().st_size
    with segment.open("ab") as f:
        f.write(forged + b"\n" + later + b"\n")  # b began, at another time
    said: list[str] = []
    with BatchStore.open(out, warn=said.append):
        pass
    rows = {r["id"]: r for r in list_rollouts(out)}
    assert rows[a.rollout_id]["status"] == "queued" and rows[a.rollout_id]["reward"] is None
    assert rows[b.rollout_id]["status"] == "running"
    refused = [e for e in read_events(out) if e["type"] == "refused"]
    assert [e["id"] for e in refused] == [a.rollout_id, b.rollout_id]
    assert refused[0]["record"] == [0, size, len(forged) + 1]
    assert "never began" in refused[0]["reason"] and "started_at" in refused[1]["reason"]
    assert len(said) == 2 and all("refused" in line for line in said)
    assert pstore.read_record(out, a.rollout_id) == {}  # left unindexed: no reader sees it
    assert pstore.read_record(out, b.rollout_id) == started


def test_reopen_sets_an_unreadable_record_of_an_unfinished_rollout_aside(tmp_path: Path) -> None:
    out = tmp_path / "out"
    [a] = _assignments(1)
    with BatchStore.create(out, {}) as store:
        store.add_assignments([a])
        store.begin(a).update(phase="agent")
    segment = out / "rollouts" / "segment-000.jsonl"
    segment.write_bytes(segment.read_bytes()[:10])  # a machine crash took its tail
    said: list[str] = []
    with BatchStore.open(out, warn=said.append) as store:
        rec = store.begin(a)  # continues attempt 1 from its events, a fresh record
        rec.finish("completed", phase="done", reward=1.0)
    [ev] = [e for e in read_events(out) if e["type"] == "recovered" and "id" in e]
    assert ev["id"] == a.rollout_id and ev["was"] == "running" and ev["record"][0] == 0
    assert len(said) == 1 and "missing or cut short" in said[0]
    assert count_rollouts(out) == {"completed": 1}
    assert pstore.read_record(out, a.rollout_id)["reward"] == 1.0


def test_reopen_records_an_ended_rollout_whose_record_was_lost_interrupted(
    tmp_path: Path,
) -> None:
    out = tmp_path / "out"
    [a, b] = _assignments(2)
    with BatchStore.create(out, {}) as store:
        store.add_assignments([a, b])
        _trivial(store, a)
        _trivial(store, b)
    segment = out / "rollouts" / "segment-000.jsonl"
    where = pstore.locate_record(out, b.rollout_id)
    assert where is not None
    data = bytearray(segment.read_bytes())
    data[where[1] + where[2] - 1] = ord(" ")  # its line no longer ends whole
    segment.write_bytes(bytes(data))
    said: list[str] = []
    with BatchStore.open(out, warn=said.append):
        pass
    assert count_rollouts(out) == {"completed": 1, "interrupted": 1}
    assert pstore.read_record(out, b.rollout_id)["error"]["type"] == "RecordLost"
    assert pstore.read_record(out, a.rollout_id)["status"] == "completed"
    assert len(said) == 1 and b.rollout_id in said[0]


def test_a_lost_event_log_is_restated_and_still_refuses_a_forged_record(tmp_path: Path) -> None:
    out = tmp_path / "out"
    plan = _assignments(4)
    with BatchStore.create(out, {}) as store:
        store.add_assignments(plan)
        for a in plan[:2]:
            _trivial(store, a)
    before = list_rollouts(out, limit=None)
    (out / "events.jsonl").unlink()
    forged = {"id": plan[3].rollout_id, "attempt": 1, "status": "completed", "reward": 1.0}
    (out / "rollouts" / f"{plan[3].rollout_id}.json").write_bytes(orjson.dumps(forged))
    said: list[str] = []
    with BatchStore.open(out, warn=said.append):
        pass
    assert list_rollouts(out, limit=None) == before
    assert "events.jsonl was missing" in said[0] and "refused" in said[1]
    kinds = [e["type"] for e in read_events(out)]
    assert kinds[0] == "recovered" and kinds.count("assigned") == 4 and "refused" in kinds
    for name in ("index.sqlite", "index.sqlite-wal", "index.sqlite-shm"):
        (out / name).unlink(missing_ok=True)
    with BatchStore.open(out, warn=said.append):  # the restated log rebuilds the same index
        pass
    assert list_rollouts(out, limit=None) == before and len(said) == 2


# -- durability modes ----------------------------------------------------------------------------


class _SyncCounter:
    def __init__(self, monkeypatch: pytest.MonkeyPatch) -> None:
        self.fsyncs = 0
        self.syncfs = 0
        real_fsync = os.fsync
        real_syncfs = _files.sync_filesystem

        def fsync(fd: int) -> None:
            self.fsyncs += 1
            real_fsync(fd)

        def syncfs(fd: int) -> None:
            self.syncfs += 1
            real_syncfs(fd)

        monkeypatch.setattr(os, "fsync", fsync)
        monkeypatch.setattr(_files, "sync_filesystem", syncfs)


def test_strict_fsyncs_every_state_change_before_returning(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    store = BatchStore.create(tmp_path / "out", {}, durability="strict", window=60)
    try:
        counter = _SyncCounter(monkeypatch)
        rec = store.begin(Assignment("r", "t"))
        assert counter.fsyncs == 1  # the event (the record waits for the next update)
        rec.update(phase="agent")
        assert counter.fsyncs == 1 + 3  # rollouts/ (a new segment), the segment, the event
        rec.append_turn({"n": 1})
        assert counter.fsyncs == 4 + 3  # rollouts/ (new folder), the new file, its folder
        rec.append_turn({"n": 2})
        assert counter.fsyncs == 7 + 1
        rec.finish("completed", reward=1.0)
        assert counter.fsyncs == 8 + 2  # the segment, the event
        assert counter.syncfs == 0
    finally:
        store.close()


def test_default_groups_syncs_into_one_per_window(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    store = BatchStore.create(tmp_path / "out", {}, window=0.1)
    try:
        counter = _SyncCounter(monkeypatch)
        for a in _assignments(200):
            _trivial(store, a)
        assert counter.fsyncs == 0
        time.sleep(0.5)  # the writes' window, and the first snapshot's
        settled = counter.syncfs
        assert settled >= 1
        time.sleep(0.35)
        assert counter.syncfs == settled  # nothing new written: no sync
        assert counter.fsyncs == 0
    finally:
        store.close()
    assert count_rollouts(tmp_path / "out") == {"completed": 200}


def test_a_failed_background_flush_surfaces_on_the_next_call(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    store = BatchStore.create(tmp_path / "out", {}, window=0.02)

    def broken(fd: int) -> None:
        raise OSError(5, "Input/output error")

    monkeypatch.setattr(_files, "sync_filesystem", broken)
    store.event("x")
    deadline = time.monotonic() + 5
    while store._error is None and time.monotonic() < deadline:
        time.sleep(0.01)
    with pytest.raises(StoreError, match="Input/output error"):
        store.event("y")
    with pytest.raises(StoreError):
        store.close()


# -- the index and its readers --------------------------------------------------------------------


def test_the_index_filters_sorts_and_pages(tmp_path: Path) -> None:
    out = tmp_path / "out"
    with BatchStore.create(out, {}) as store:
        store.add_assignments(
            _assignments(10, "m1") + [Assignment(f"x{i}", "tx", "a", "m2", i) for i in range(5)]
        )
        for i, a in enumerate(_assignments(10, "m1")):
            rec = store.begin(a)
            if i % 3 == 0:
                rec.finish(
                    "failed", phase="grading", error={"phase": "grading", "type": "TaskError"}
                )
            else:
                rec.finish("completed", reward=i / 10, cost=0.001 * i)
    assert count_rollouts(out) == {"completed": 6, "failed": 4, "queued": 5}
    assert count_rollouts(out, by="model") == {"m1": 10, "m2": 5}
    top = list_rollouts(out, status="completed", order_by="reward", descending=True, limit=2)
    assert [r["id"] for r in top] == ["t0008.a.r0", "t0007.a.r0"]
    page2 = list_rollouts(
        out, status="completed", order_by="reward", descending=True, limit=2, offset=2
    )
    assert [r["id"] for r in page2] == ["t0005.a.r0", "t0004.a.r0"]
    failed = list_rollouts(out, error_phase="grading")
    assert [r["id"] for r in failed] == ["t0000.a.r0", "t0003.a.r0", "t0006.a.r0", "t0009.a.r0"]
    assert all(r["error_type"] == "TaskError" and r["reward"] is None for r in failed)
    assert [r["repeat"] for r in list_rollouts(out, model="m2")] == [0, 1, 2, 3, 4]
    assert len(list_rollouts(out, status=["queued", "failed"], limit=None)) == 9
    assert [r["status"] for r in list_rollouts(out, ended=False)] == ["queued"] * 5
    assert len(list_rollouts(out, ended=True, model="m1", limit=None)) == 10
    with pytest.raises(ValueError):
        list_rollouts(out, order_by="id; DROP TABLE rollouts")


def test_the_snapshot_lists_every_assignment_with_its_status(tmp_path: Path) -> None:
    out = tmp_path / "out"
    with BatchStore.create(out, {}) as store:
        store.add_assignments(_assignments(5))
        for a in _assignments(5)[:3]:
            _trivial(store, a)
    state = read_state(out)
    assert state is not None
    assert state["counts"] == {"completed": 3, "queued": 2}
    assert [(r["id"], r["status"]) for r in state["rollouts"]] == [
        (a.rollout_id, "completed" if i < 3 else "queued") for i, a in enumerate(_assignments(5))
    ]


def test_a_reader_queries_the_index_while_the_writer_commits(tmp_path: Path) -> None:
    out = tmp_path / "out"
    store = BatchStore.create(out, {}, window=0.01)
    errors: list[BaseException] = []
    seen: list[int] = []
    stop = threading.Event()

    def read() -> None:
        try:
            while not stop.is_set():
                seen.append(count_rollouts(out).get("completed", 0))
                list_rollouts(
                    out, status="completed", order_by="ended_at", descending=True, limit=20
                )
        except BaseException as exc:
            errors.append(exc)

    reader = threading.Thread(target=read)
    try:
        store.add_assignments(_assignments(1500))
        reader.start()
        for a in _assignments(1500):
            _trivial(store, a)
        store.flush()
        time.sleep(0.05)
    finally:
        stop.set()
        if reader.is_alive():
            reader.join()
        store.close()
    assert errors == []
    assert seen == sorted(seen) and len(seen) > 3
    assert seen[-1] > 0 and count_rollouts(out) == {"completed": 1500}


def test_events_can_be_tailed_from_where_the_last_read_ended(tmp_path: Path) -> None:
    out = tmp_path / "out"
    with BatchStore.create(out, {}) as store:
        store.event("started", n=1)
        first = read_events(out)
        assert [e["type"] for e in first] == ["started"]
        store.event("cost_cap", spent=1.5)
        later = read_events(out, first.end)
        assert [(e["type"], e.get("spent")) for e in later] == [("cost_cap", 1.5)]


def test_the_plans_assignments_are_what_the_store_takes(tmp_path: Path) -> None:
    from proctor.batch import Assignment as Planned

    row = Planned(rollout_id="t--a--r1", task="t", agent="a", model="m", repeat=1, enabled=True)
    with BatchStore.create(tmp_path / "out", {}) as store:
        store.add_assignments([row])
        store.begin(row).finish("completed", reward=1.0)
    [got] = list_rollouts(tmp_path / "out")
    assert (got["id"], got["agent"], got["model"], got["repeat"]) == ("t--a--r1", "a", "m", 1)


def test_every_export_resolves() -> None:
    for name in pstore.__all__:
        assert getattr(pstore, name) is not None


def test_the_batch_package_still_gives_the_store_names_it_exported() -> None:
    """Code written before `proctor.store` imports the same objects from `proctor.batch`."""
    old = ["BatchStore", "RolloutRecorder", "PlannedRollout", "Durability", "LAYOUT_VERSION"]
    old += ["TERMINAL", "JsonlReader", "list_rollouts", "count_rollouts", "read_rollout"]
    old += ["read_events", "read_state", "read_batch"]
    for name in old:
        assert getattr(proctor.batch, name) is getattr(pstore, name), name


def test_read_record_follows_an_index_rebuilt_under_it(tmp_path: Path) -> None:
    out = tmp_path / "out"
    [a, b] = _assignments(2)
    with BatchStore.create(out, {}) as store:
        store.add_assignments([a, b])
        _trivial(store, a, reward=0.25)
    assert pstore.read_record(out, a.rollout_id)["reward"] == 0.25  # (its connection held)
    for name in ("index.sqlite", "index.sqlite-wal", "index.sqlite-shm"):
        (out / name).unlink(missing_ok=True)
    with BatchStore.open(out) as store:  # a new index file, rebuilt from the events
        _trivial(store, b, reward=0.75)
    assert pstore.read_record(out, b.rollout_id)["reward"] == 0.75
    assert pstore.read_record(out, a.rollout_id)["reward"] == 0.25
