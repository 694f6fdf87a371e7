"""`proctor run --group N` on an environment with group rewards: each group's rewards
and advantages reach the runs file and the record; `--group 1` is refused up front."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from cli_helpers import assert_user_error, proctor, write

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
