"""An output directory someone tampered with: `--resume` and `report` check it, never
crash on it, and say what they refused or recovered.

Each test runs a real batch, changes its files as an attacker (or a bad disk) would,
then runs `proctor batch --resume` / `proctor batch report` as a user does.
"""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from exec_env import BROKEN, ROWS, config, workspace, write_config

from _support.waiting import until
from proctor.batch import aexecute, count_rollouts, execute, list_rollouts, read_events
from proctor.store import locate_record, read_record

PROCTOR = str(Path(sys.executable).with_name("proctor"))
SLOW = "echo-hi--blocker--r1"  # third in plan order: still queued when the batch stops
RUNTIME = {"kind": "local"}  # the rollouts run in the runner: the test's files are trusted


def cli(*args: str, check: int | None = 0) -> subprocess.CompletedProcess[str]:
    proc = subprocess.run(
        [PROCTOR, *args], capture_output=True, text=True, timeout=120, check=False
    )
    if check is not None:
        assert proc.returncode == check, proc.stderr
    assert "Traceback" not in proc.stderr, proc.stderr
    return proc


def events(out: Path, kind: str) -> list[dict[str, Any]]:
    return [e for e in read_events(out) if e["type"] == kind]


def completed_batch(tmp_path: Path) -> Path:
    workspace(tmp_path)
    out = tmp_path / "out"
    result = execute(write_config(tmp_path, config(runtime=RUNTIME)), out)
    assert result.counts == {"completed": 3}
    return out


async def stopped_batch(tmp_path: Path) -> Path:
    """A batch cancelled with one rollout in flight and two never begun."""
    workspace(tmp_path)
    cfg = write_config(
        tmp_path,
        config(
            agents=[{"kind": "python", "agent": "agents.py:blocker"}],
            max_concurrent=1,
            runtime=RUNTIME,
        ),
    )
    out = tmp_path / "out"
    task = asyncio.create_task(aexecute(cfg, out))
    await until(lambda: task.done() or any(tmp_path.glob("started-*")), "a rollout in flight", 60)
    assert not task.done(), task.result()
    task.cancel()
    assert (await task).counts == {"interrupted": 1, "queued": 2}
    return out


def record_of(out: Path, rid: str) -> dict[str, Any]:
    return read_record(out, rid)


def append_line(out: Path, record: dict[str, Any]) -> None:
    """A record line added to the segment behind the runner's back (no event)."""
    with open(out / "rollouts" / "segment-000.jsonl", "a") as f:
        f.write(json.dumps(record) + "\n")


def line_at(out: Path, where: list[int]) -> dict[str, Any]:
    segment, offset, length = where
    with open(out / "rollouts" / f"segment-{segment:03d}.jsonl", "rb") as f:
        f.seek(offset)
        return json.loads(f.read(length))


async def test_a_forged_record_of_a_rollout_that_never_began_is_refused_and_run(
    tmp_path: Path,
) -> None:
    out = await stopped_batch(tmp_path)
    forged = {
        "id": SLOW, "task": "echo-hi", "agent": "blocker", "model": None, "repeat": 1,
        "attempt": 1, "status": "completed", "phase": "done", "reward": 1.0,
        "started_at": 1.0, "ended_at": 2.0, "answer": "forged",
    }  # fmt: skip
    append_line(out, forged)
    (tmp_path / "gate").write_text("open")

    proc = cli("batch", "--resume", str(out), "--quiet", check=1)  # one stays interrupted
    assert f"refused the record of {SLOW} at rollouts/segment-000.jsonl" in proc.stderr
    assert "never began" in proc.stderr
    assert json.loads(proc.stdout)["ran"] == 2  # the forged one ran for real
    assert (tmp_path / f"started-{SLOW.split('--')[0]}").exists()
    assert record_of(out, SLOW)["answer"] == "hi" and record_of(out, SLOW)["started_at"] > 2.0
    [refused] = events(out, "refused")
    assert refused["id"] == SLOW and refused["claimed"]["status"] == "completed"
    assert line_at(out, refused["record"])["answer"] == "forged"  # there, never indexed
    assert count_rollouts(out) == {"completed": 2, "interrupted": 1}


def test_a_record_of_another_attempt_is_refused(tmp_path: Path) -> None:
    out = completed_batch(tmp_path)
    rid = "add-1-2--solver--r1"
    row = next(r for r in list_rollouts(out) if r["id"] == rid)
    # A runner died in flight (its row running), and a record claims a later attempt.
    with open(out / "events.jsonl", "a") as f:
        f.write(json.dumps({"t": 3.0, "type": "rollout", "id": rid, "status": "running"}) + "\n")
    forged = {**record_of(out, rid), "attempt": 2, "status": "completed", "reward": 1.0}
    append_line(out, forged)

    proc = cli("batch", "--resume", str(out), "--quiet")
    assert f"refused the record of {rid}" in proc.stderr and "attempt 2" in proc.stderr
    rows = {r["id"]: r for r in list_rollouts(out)}
    # The forged line was appended beside the real one, which still stands: the row is
    # corrected to it (a record file replaced by the forgery was lost: interrupted).
    assert rows[rid]["status"] == "completed" and rows[rid]["attempt"] == row["attempt"]
    assert record_of(out, rid)["attempt"] == 1


def test_the_report_shows_what_the_events_witness_not_what_a_record_claims(
    tmp_path: Path,
) -> None:
    workspace(tmp_path, [*ROWS, BROKEN])
    out = tmp_path / "out"
    execute(write_config(tmp_path, config(runtime=RUNTIME, expected_rollouts=4)), out)
    rid = "broken--solver--r1"
    forged = {**record_of(out, rid), "status": "completed", "reward": 1.0, "error": None}
    where = locate_record(out, rid)
    assert where is not None
    name, offset, length = where
    line = json.dumps(forged).encode()
    assert len(line) < length
    with open(out / "rollouts" / name, "r+b") as f:  # rewritten in place, padded
        f.seek(offset)
        f.write(line.ljust(length - 1) + b"\n")
    assert record_of(out, rid)["reward"] == 1.0

    doc = json.loads(cli("batch", "report", str(out), "--json").stdout)
    assert doc["totals"]["by_status"]["failed"] == 1 and doc["totals"]["graded"] == 3
    [row] = [r for r in doc["rollouts"] if r["id"] == rid]
    assert row["status"] == "failed" and row["reward"] is None and row["error_phase"] == "grading"


def _garble(file: Path) -> None:
    """Overwrite the middle of `file` (everything past its first page) with garbage."""
    size = file.stat().st_size
    assert size > 3 * 4096
    with open(file, "r+b") as f:
        f.seek(4096)
        f.write(os.urandom(size - 2 * 4096))


def test_garbage_pages_in_the_index_are_rebuilt_by_report_and_resume(tmp_path: Path) -> None:
    out = completed_batch(tmp_path)
    rows = list_rollouts(out)
    _garble(out / "index.sqlite")

    proc = cli("batch", "report", str(out), "--json")
    assert "index.sqlite" in proc.stderr and "rebuilt from events.jsonl" in proc.stderr
    doc = json.loads(proc.stdout)
    assert doc["totals"]["rollouts"] == 3 and doc["totals"]["mean_reward"] == 1.0
    assert list_rollouts(out) == rows
    assert (out / "index.sqlite.corrupt").exists()

    _garble(out / "index.sqlite")
    proc = cli("batch", "--resume", str(out), "--quiet")
    assert "rebuilt from events.jsonl" in proc.stderr
    assert json.loads(proc.stdout)["ran"] == 0
    assert list_rollouts(out) == rows
    assert [e["file"] for e in events(out, "recovered")] == ["index.sqlite", "index.sqlite"]


def test_a_corrupt_index_without_its_event_log_is_one_clear_error(tmp_path: Path) -> None:
    out = completed_batch(tmp_path)
    _garble(out / "index.sqlite")
    (out / "events.jsonl").unlink()
    for args in (("report", str(out)), ("--resume", str(out), "--quiet")):
        proc = cli("batch", *args, check=1)
        [line] = proc.stderr.strip().splitlines()
        assert line.startswith("error: ") and "corrupt and could not be rebuilt" in line


def test_a_record_cut_short_is_recovered_and_said(tmp_path: Path) -> None:
    out = completed_batch(tmp_path)
    path = out / "rollouts" / "segment-000.jsonl"
    data = path.read_bytes()
    rid = json.loads(data.splitlines()[-1])["id"]  # the last record written
    where = locate_record(out, rid)
    assert where is not None
    path.write_bytes(data[: where[1] + where[2] // 2])  # a machine crash took the tail

    proc = cli("batch", "--resume", str(out), "--quiet", check=1)
    assert f"the record of {rid} at rollouts/segment-000.jsonl:{where[1]} is missing" in (
        proc.stderr
    )
    [ev] = [e for e in events(out, "recovered") if e.get("id") == rid]
    assert ev["was"] == "completed" and ev["record"] == [0, *where[1:]]
    rec = record_of(out, rid)
    assert rec["status"] == "interrupted" and rec["error"]["type"] == "RecordLost"
    assert rec["reward"] is None

    cli("batch", "--resume", str(out), "--retry-errors", "--quiet")
    assert record_of(out, rid)["status"] == "completed" and record_of(out, rid)["attempt"] == 2


def test_a_deleted_event_log_is_restated_from_the_index_and_said(tmp_path: Path) -> None:
    out = completed_batch(tmp_path)
    rows = list_rollouts(out)
    (out / "events.jsonl").unlink()

    proc = cli("batch", "--resume", str(out), "--quiet")
    assert "events.jsonl was missing" in proc.stderr and "3 rollouts" in proc.stderr
    [ev] = events(out, "recovered")
    assert ev["file"] == "events.jsonl" and ev["lost_bytes"] > 0
    assert len(events(out, "assigned")) == 3
    # The restated log witnesses what ran: an index rebuilt from it is the same.
    for name in ("index.sqlite", "index.sqlite-wal", "index.sqlite-shm"):
        (out / name).unlink(missing_ok=True)
    proc = cli("batch", "report", str(out), "--json")
    assert json.loads(proc.stdout)["totals"]["by_status"]["completed"] == 3
    assert list_rollouts(out) == rows


def test_a_lost_event_log_and_index_are_refused(tmp_path: Path) -> None:
    out = completed_batch(tmp_path)
    for name in ("events.jsonl", "index.sqlite", "index.sqlite-wal", "index.sqlite-shm"):
        (out / name).unlink(missing_ok=True)
    proc = cli("batch", "--resume", str(out), "--quiet", check=1)
    [line] = proc.stderr.strip().splitlines()
    assert "events.jsonl and index.sqlite are both missing" in line


@pytest.fixture(autouse=True)
def no_provider_keys(monkeypatch: pytest.MonkeyPatch) -> None:
    for var in ("OPENAI_API_KEY", "ANTHROPIC_API_KEY", "RAY_ADDRESS", "MY_SERVICE_TOKEN"):
        monkeypatch.delenv(var, raising=False)
