"""`proctor run --group N` on an environment with group rewards: each group's rewards
and advantages reach the runs file and the record; `--group 1` is refused up front."""

from __future__ import annotations

import json
import signal
import subprocess
import sys
from pathlib import Path

import pytest
from cli_helpers import assert_user_error, proctor, write

from _support.signals import default_sigint
from _support.waiting import wait_until
from proctor.batch import list_rollouts, read_rollout

TASKS = """
from proctor import Environment
from proctor.env import group_rewards

env = Environment("coin")
env.group_reward(weight=0.0)(group_rewards.pass_at_k(2))


@env.template
async def flip(n: int):
    answer = yield f"Call {n}"
    yield 1.0 if answer == "heads" else 0.0


tasks = [flip(n=1), flip(n=2)]


async def alternate(run):
    # The first and third rollouts of a row win: every group of 2 has one win.
    alternate.count = getattr(alternate, "count", 0) + 1
    run.answer = "heads" if alternate.count % 2 else "tails"
"""


@pytest.fixture
def source(tmp_path: Path) -> Path:
    return write(tmp_path / "tasks.py", TASKS)


def test_group_rewards_and_advantages_reach_the_runs_file_and_the_record(
    source: Path, tmp_path: Path
) -> None:
    out, record = tmp_path / "runs.jsonl", tmp_path / "record"
    result = proctor(
        "run", source, "--agent", f"{source}:alternate", "--group", "2", "--max-concurrent", "1",
        "--output", out, "--output-dir", record,
    )  # fmt: skip
    assert result.returncode == 0, result.stderr
    rows = [json.loads(line) for line in out.read_text().splitlines()]
    assert len(rows) == 4
    for row in rows:
        assert row["group_rewards"] == {"pass_at_2": 1.0}
        assert row["advantage"] == pytest.approx(row["reward"] - 0.5)
    for index_row in list_rollouts(record, limit=None):
        recorded = read_rollout(record, index_row["id"])["record"]
        assert recorded["group_rewards"] == {"pass_at_2": 1.0}
        assert recorded["advantage"] == pytest.approx(recorded["reward"] - 0.5)


def test_a_group_of_one_is_refused_before_anything_runs(source: Path, tmp_path: Path) -> None:
    result = proctor("run", source, "--agent", f"{source}:alternate", "--no-record")
    assert_user_error(result, "group rewards (pass_at_2)", "--group N")


HANGS = """
import asyncio
from pathlib import Path

from proctor import Environment
from proctor.env import group_rewards

env = Environment("halves")
env.group_reward(weight=0.0)(group_rewards.best_of_n())


@env.template
async def half(n: int):
    answer = yield f"half {n}"
    yield 1.0


async def agent(run):
    here = Path(__file__).parent
    if (here / "one-done").exists():  # the second rollout of the group never ends
        (here / "second-started").touch()
        await asyncio.sleep(60)
    (here / "one-done").touch()
    run.answer = "ok"


tasks = [half(n=1)]
"""


def test_an_interrupted_group_still_writes_its_ended_runs(tmp_path: Path) -> None:
    source = write(tmp_path / "hangs.py", HANGS)
    out = tmp_path / "runs.jsonl"
    proc = subprocess.Popen(
        [sys.executable, "-m", "proctor.cli", "run", str(source), "--agent",
         f"{source}:agent", "--group", "2", "--max-concurrent", "1", "--output", str(out),
         "--no-record"],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
        preexec_fn=default_sigint,  # a SIGINT-ignoring shell must not make it deaf
    )  # fmt: skip
    try:
        assert wait_until(lambda: (tmp_path / "second-started").exists(), within=30)
        proc.send_signal(signal.SIGINT)
        proc.communicate(timeout=30)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.communicate()
    rows = [json.loads(line) for line in out.read_text().splitlines()]
    assert [row["status"] for row in rows] == ["completed"]  # held for its group, kept
    assert "group_rewards" not in rows[0]  # its group never ended
