"""`proctor show`: a recorded run's rollouts, and one rollout's transcript."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from cli_helpers import LETTERS, assert_user_error, proctor, write

TASKS = LETTERS / "tasks.py"


@pytest.fixture
def record(tmp_path: Path) -> Path:
    """A recorded run of the letters taskset where every `sum` row fails in the agent."""
    agent = write(
        tmp_path / "half.py",
        """
        import re

        async def agent(run):
            if "sum" in run.prompt:
                raise RuntimeError("cannot add")
            run.trace.add("tool_call", {"name": "look", "arguments": {"q": 1}}, id="c1")
            run.trace.add("tool_result", "looked", id="c1", name="look")
            run.trace.content = re.findall(r"'([^']*)'", run.prompt)[-1][::-1]
        """,
    )
    out = tmp_path / "record"
    result = proctor("run", TASKS, "--agent", f"{agent}:agent", "--output-dir", out)
    assert result.returncode == 0, result.stderr
    return out


def test_lists_every_rollout(record: Path) -> None:
    result = proctor("show", record)
    assert result.returncode == 0, result.stderr
    lines = result.stdout.splitlines()
    assert lines[0].startswith("letters letters-") and lines[0].endswith("12 rollouts")
    assert lines[1].split() == ["id", "status", "reward", "error", "phase", "error"]
    rows = [line.split() for line in lines[2:]]
    assert len(rows) == 12
    sums = [r for r in rows if r[0].startswith("sum-")]
    assert sums and all(r[1:] == ["failed", "-", "agent", "RuntimeError"] for r in sums)
    as_json = json.loads(proctor("show", record, "--json").stdout)
    assert len(as_json["rollouts"]) == 12


def _ids(record: Path, prefix: str) -> list[str]:
    rows = json.loads(proctor("show", record, "--json").stdout)["rollouts"]
    return [r["id"] for r in rows if r["id"].startswith(prefix)]


def test_one_rollout_reads_as_a_transcript(record: Path) -> None:
    rollout = record / "rollouts" / f"{_ids(record, 'reverse-')[0]}.json"  # (its name)
    by_id = proctor("show", record, rollout.stem)
    by_file = proctor("show", rollout)
    assert by_id.returncode == 0, by_id.stderr
    assert by_id.stdout == by_file.stdout
    text = by_id.stdout
    assert text.startswith(f"rollout {rollout.stem}")
    for heading in ("-- prompt", "-- tool call look", "-- tool result look", "-- answer"):
        assert heading in text
    assert "Write the word" in text and "reward 1.000" in text
    doc = json.loads(proctor("show", rollout, "--json").stdout)
    assert doc["record"]["status"] == "completed"
    assert [s["kind"] for s in doc["steps"]][:2] == ["task", "user"]


def test_a_failed_rollout_shows_its_error(record: Path) -> None:
    failed = _ids(record, "sum-")[0]
    text = proctor("show", record, failed[:12]).stdout
    assert "status failed (phase agent)" in text
    assert "-- error\n[agent] RuntimeError: cannot add" in text


def test_mistakes_are_one_line(record: Path, tmp_path: Path) -> None:
    assert_user_error(proctor("show", tmp_path), "not a recorded run")
    assert_user_error(proctor("show", record, "nope"), "no rollout 'nope'")
    assert_user_error(proctor("show", record, "sum"), "matches 4 rollouts")
