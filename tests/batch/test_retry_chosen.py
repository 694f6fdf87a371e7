"""`--resume OUT --retry ID...` and `--retry-where FILTER`: new attempts for chosen
rollouts, the old attempt archived; what an unfinished run leaves, and the command that
runs it; the live counts of a retry. Real batches through the `proctor` command."""

from __future__ import annotations

import json
import shlex
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from exec_env import BROKEN, ROWS, config, workspace, write_config

from _support.signals import default_sigint, sigint_once
from proctor.batch import count_rollouts, read_rollout

PROCTOR = str(Path(sys.executable).with_name("proctor"))


def cli(*args: str, check: int | None = 0) -> subprocess.CompletedProcess[str]:
    proc = subprocess.run([PROCTOR, *args], capture_output=True, text=True, timeout=60, check=False)
    if check is not None:
        assert proc.returncode == check, proc.stderr
    return proc


def executed(tmp_path: Path, rows: list[dict[str, Any]], check: int = 0, **over: Any) -> Path:
    workspace(tmp_path, rows)
    cfg = write_config(tmp_path, config(expected_rollouts=len(rows), **over))
    out = tmp_path / "out"
    cli("batch", str(cfg), "--execute", "--output-dir", str(out), "--quiet", check=check)
    return out


def test_retry_runs_the_named_rollouts_again_and_archives_their_first_attempt(
    tmp_path: Path,
) -> None:
    out = executed(tmp_path, ROWS)
    proc = cli("batch", "--resume", str(out), "--retry", "add-1-2--solver--r1", "--quiet")
    assert json.loads(proc.stdout)["ran"] == 1
    data = read_rollout(out, "add-1-2--solver--r1")
    assert data["record"]["attempt"] == 2 and data["attempts"] == [1]
    assert read_rollout(out, "add-3-4--solver--r1")["record"]["attempt"] == 1
    assert count_rollouts(out) == {"completed": 3}


def test_retry_where_picks_rollouts_by_the_index_columns(tmp_path: Path) -> None:
    out = executed(tmp_path, [*ROWS, BROKEN], check=1)
    where = "status=failed and error_phase=grading, attempt=1"
    proc = cli("batch", "--resume", str(out), "--retry-where", where, "--quiet", check=1)
    assert json.loads(proc.stdout)["ran"] == 1
    assert read_rollout(out, "broken--solver--r1")["attempts"] == [1]
    assert read_rollout(out, "echo-hi--solver--r1")["record"]["attempt"] == 1


@pytest.mark.parametrize(
    ("where", "says"),
    [
        ("colour=red", "unknown key 'colour'; one of status, task, agent"),
        ("status", "'status' is not key=value"),
        ("attempt=two", "attempt='two' is not a whole number"),
        (" , ", "an empty filter"),
    ],
)
def test_a_bad_filter_is_one_clear_line(tmp_path: Path, where: str, says: str) -> None:
    proc = cli("batch", "--resume", str(tmp_path), "--retry-where", where, check=None)
    assert proc.returncode != 0 and proc.stdout == ""
    (line,) = proc.stderr.splitlines()
    assert line.startswith("error: --retry-where: ") and says in line


def test_an_unknown_id_is_refused_and_nothing_runs(tmp_path: Path) -> None:
    out = executed(tmp_path, ROWS[:1])
    proc = cli("batch", "--resume", str(out), "--retry", "nope--solver--r1", check=1)
    assert "--retry: no rollout 'nope--solver--r1'" in proc.stderr
    assert read_rollout(out, "add-1-2--solver--r1")["attempts"] == []


def test_retry_errors_never_counts_below_zero_in_the_live_view(tmp_path: Path) -> None:
    out = executed(tmp_path, [*ROWS, BROKEN], check=1)
    proc = cli("batch", "--resume", str(out), "--retry-errors", check=1)  # plain live lines
    lines = [line for line in proc.stderr.splitlines() if line.startswith("batch exec: ")]
    assert lines and all(" -" not in line.split("|")[1] for line in lines), proc.stderr
    assert "3/4 done 1 failed 0 interrupted" in lines[-1] and "queued 0" in lines[-1]


def test_an_interrupted_run_says_what_is_left_and_the_command_that_runs_it(
    tmp_path: Path,
) -> None:
    workspace(tmp_path, ROWS)
    blocker = [{"kind": "python", "agent": "agents.py:blocker"}]
    cfg = write_config(tmp_path, config(agents=blocker, max_concurrent=1))
    out = tmp_path / "out"
    child = subprocess.Popen(
        [PROCTOR, "batch", str(cfg), "--execute", "--output-dir", str(out), "--quiet"],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        preexec_fn=default_sigint,
    )
    _, stderr = sigint_once(child, (tmp_path / "started-add-1-2").exists)
    assert child.returncode == 130, stderr
    retry = f"proctor batch --resume {out} --retry-where 'status=interrupted'"
    assert f"left: 1 interrupted, 2 queued; to run them: {retry}" in stderr

    (tmp_path / "gate").write_text("open")
    proc = cli("batch", "--resume", str(out), "--quiet", check=1)
    assert f"left: 1 interrupted; to run them: {retry}\n" in proc.stderr
    cli(*shlex.split(retry)[1:], "--quiet", check=0)
    assert count_rollouts(out) == {"completed": 3}
    assert read_rollout(out, "add-1-2--blocker--r1")["attempts"] == [1]


SLOW_GRADE = """

import asyncio


@mini.template
async def slowgrade():
    answer = yield "Say hi"
    (HERE / "grading").write_text("")
    while True:
        await asyncio.sleep(0.05)
    yield graders.exact(answer, "hi")
"""


def test_a_rollout_interrupted_in_grading_is_interrupted_not_an_evaluation_failure(
    tmp_path: Path,
) -> None:
    workspace(
        tmp_path, [{"env": "mini", "id": "slowgrade", "args": {}, "slug": "slow"}], SLOW_GRADE
    )
    cfg = write_config(tmp_path, config(expected_rollouts=1))
    out = tmp_path / "out"
    child = subprocess.Popen(
        [PROCTOR, "batch", str(cfg), "--execute", "--output-dir", str(out), "--quiet"],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        preexec_fn=default_sigint,
    )
    stdout, stderr = sigint_once(child, (tmp_path / "grading").exists)
    assert child.returncode == 130, stderr
    doc = json.loads(stdout)
    assert doc["counts"] == {"interrupted": 1} and doc["evaluation_failed"] == 0
    assert read_rollout(out, "slow--solver--r1")["record"]["phase"] == "grading"
