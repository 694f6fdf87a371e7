"""`proctor run` records by default, checks rows first, and says which agent ran."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from cli_helpers import LETTERS, SOLVER, assert_user_error, proctor, write

from proctor.batch import list_rollouts, read_batch

TASKS = LETTERS / "tasks.py"


@pytest.fixture
def no_runs_dir(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("PROCTOR_RUNS_DIR", raising=False)


@pytest.mark.usefixtures("no_runs_dir")
def test_every_run_is_recorded_in_a_new_folder(tmp_path: Path) -> None:
    for _ in range(2):
        result = proctor("run", TASKS, "--agent", SOLVER, "--json", cwd=tmp_path)
        assert result.returncode == 0, result.stderr
    records = sorted((tmp_path / "proctor-runs").iterdir())
    assert len(records) == 2 and all(r.name.startswith("letters-") for r in records)
    summary = json.loads(result.stdout)
    assert summary["record"] == str(records[1]) or summary["record"] == str(records[0])
    assert summary["agent"] == SOLVER
    batch = read_batch(summary["record"])
    assert batch["batch_id"] == Path(summary["record"]).name == summary["id"]
    assert batch["command"]["timeouts"]["agent"] == 1800.0  # a default deadline per phase
    rows = list_rollouts(summary["record"], limit=None)
    assert len(rows) == 12 and {r["status"] for r in rows} == {"completed"}
    assert {r["reward"] for r in rows} == {1.0}


@pytest.mark.usefixtures("no_runs_dir")
def test_output_dir_no_record_and_output(tmp_path: Path) -> None:
    out = tmp_path / "mine"
    lines = tmp_path / "runs.jsonl"
    result = proctor("run", TASKS, "--output-dir", out, "--output", lines, cwd=tmp_path)
    assert result.returncode == 0, result.stderr
    assert f"recorded in {out}" in result.stdout
    assert len(list_rollouts(out, limit=None)) == 12
    assert len(lines.read_text().splitlines()) == 12
    assert_user_error(proctor("run", TASKS, "--output-dir", out), "already exists")
    bare = proctor("run", TASKS, "--no-record", "--json", cwd=tmp_path)
    assert bare.returncode == 0, bare.stderr
    assert json.loads(bare.stdout)["record"] is None
    assert not (tmp_path / "proctor-runs").exists()
    usage = proctor("run", TASKS, "--no-record", "--output-dir", tmp_path / "x")
    assert usage.returncode == 2


def test_builtin_agent_is_named(tmp_path: Path) -> None:
    result = proctor("run", TASKS, "--json", "--output-dir", tmp_path / "r")
    assert json.loads(result.stdout)["agent"] == "builtin (Solver)"


def _rows(tmp_path: Path) -> Path:
    rows = [
        {"env": "letters", "id": "reverse", "args": {"word": "fine"}},
        {"env": "letters", "id": "nope", "args": {}},
        {"env": "letters", "id": "reverse", "args": {"word": "ok", "extra": 1}},
        {"env": "letters", "id": "count", "args": {"word": "banana"}},
        {"env": "letters", "id": "sum", "args": {"numbers": "not a list"}},
    ]
    path = tmp_path / "rows.jsonl"
    path.write_text("\n".join(json.dumps(r) for r in rows[:2]) + "\n\n")
    with path.open("a") as f:
        f.write("\n".join(json.dumps(r) for r in rows[2:]) + "\n")
    return path


@pytest.mark.parametrize("runtime", ["local", "subprocess"])
def test_bad_rows_are_refused_before_anything_runs(tmp_path: Path, runtime: str) -> None:
    rows = _rows(tmp_path)
    out = tmp_path / "never"
    result = proctor("run", rows, "--env-source", TASKS, "--runtime", runtime, "--output-dir", out)
    assert result.returncode == 1, result.stdout
    assert "Traceback" not in result.stderr
    first, *listed = result.stderr.splitlines()
    assert first.startswith("error: 4 of 5 rows do not fit the environment")
    assert [line.split(": ")[0].strip() for line in listed] == [
        f"{rows}:2",
        f"{rows}:4",  # line 3 is blank
        f"{rows}:5",
        f"{rows}:6",
    ]
    assert "'nope'" in listed[0] and "extra" in listed[1]
    assert "letter" in listed[2] and "numbers" in listed[3]
    assert not out.exists()  # nothing ran, nothing was recorded
    lenient = proctor(
        "run", rows, "--env-source", TASKS, "--runtime", runtime, "--allow-invalid", "--json",
        "--output-dir", out,
    )  # fmt: skip
    assert lenient.returncode == 0, lenient.stderr
    assert "warning: 4 of 5 rows" in lenient.stderr
    summary = json.loads(lenient.stdout)
    assert (summary["runs"], summary["errors"], summary["mean_reward"]) == (1, 0, 1.0)


def test_failures_show_their_traceback(tmp_path: Path) -> None:
    agent = write(
        tmp_path / "boom.py",
        """
        async def agent(run):
            return 1 / 0
        """,
    )
    result = proctor("run", TASKS, "--agent", f"{agent}:agent", "--output-dir", tmp_path / "r")
    assert result.returncode == 0, result.stderr
    assert "errors by phase: agent 12" in result.stdout
    # One failure per (phase, type) by default, every one with -v.
    assert result.stdout.count("ZeroDivisionError: division by zero") >= 1
    assert result.stdout.count("[agent] ZeroDivisionError") == 1
    verbose = proctor("run", TASKS, "--agent", f"{agent}:agent", "-v", "--json", "--no-record")
    errors = json.loads(verbose.stdout)["first_errors"]
    assert len(errors) == 12 and {e["type"] for e in errors} == {"ZeroDivisionError"}
    if errors[0]["traceback"] is not None:  # RunError.traceback (item 3) carries it
        assert f'File "{agent}", line 2' in errors[0]["traceback"]
        assert f'File "{agent}", line 2' in result.stdout
