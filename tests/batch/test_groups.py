"""Group rewards in a batch: once every repeat of a task has ended, its environment's
group rewards and each member's advantage are amended into the records, also when
the group's members ended in different runners (a resumed batch)."""

from __future__ import annotations

import json
import os
import signal
import threading
from pathlib import Path
from typing import Any

import pytest
from exec_env import config, workspace, write_config

from _support.waiting import wait_until
from proctor.batch import execute, list_rollouts, plan, read_rollout, resume

GROUPED = """

from proctor.env import group_rewards

mini.group_reward(weight=0.0)(group_rewards.best_of_n())
mini.group_reward(weight=0.5, name="rank")(group_rewards.rank())
"""

HALF = """

async def half(run):
    # Right on odd repeats only: a group of four gets rewards 1, 0, 1, 0.
    n = int(run.trace_id.split(".")[0].rsplit("r", 1)[1])
    run.answer = "3" if n % 2 else "wrong"


async def gated(run):
    (HERE / f"started-{run.trace_id}").write_text("")
    if run.trace_id.startswith("add-1-2--gated--r3"):
        while not (HERE / "gate").exists():
            await asyncio.sleep(0.02)
    await half(run)
"""

ROW = [{"env": "mini", "id": "add", "args": {"a": 1, "b": 2}, "slug": "add-1-2"}]


def _batch(root: Path, agent: str, **extra: object) -> Path:
    workspace(root, ROW, env_extra=GROUPED)
    with (root / "agents.py").open("a") as f:
        f.write(HALF)
    data = config(
        agents=[{"kind": "python", "agent": f"agents.py:{agent}", "name": agent}],
        repeats=4,
        expected_rollouts=4,
        **extra,
    )
    return write_config(root, data)


def _records(out: Path) -> list[dict[str, Any]]:
    rows = list_rollouts(out, limit=None)
    return [read_rollout(out, row["id"])["record"] or {} for row in rows]  # {}: queued


def test_a_group_gets_its_rewards_and_advantages_in_the_records(tmp_path: Path) -> None:
    out = tmp_path / "out"
    result = execute(_batch(tmp_path, "half"), out)
    assert result.counts == {"completed": 4}
    records = sorted(_records(out), key=lambda r: r["id"])
    assert [r["result"]["grade"]["subscores"][0]["value"] for r in records] == [1, 0, 1, 0]
    for record in records:
        assert record["group_rewards"]["best_of_n"] == 1.0
        base = record["result"]["grade"]["subscores"][0]["value"]
        rank = record["group_rewards"]["rank"]
        assert record["reward"] == pytest.approx((base + 0.5 * rank) / 1.5)  # rank weighs 0.5
    mean = sum(r["reward"] for r in records) / 4
    for record in records:
        assert record["advantage"] == pytest.approx(record["reward"] - mean)
    index = {row["id"]: row["reward"] for row in list_rollouts(out, limit=None)}
    assert index == {r["id"]: r["reward"] for r in records}


def test_a_group_split_across_runners_is_completed_by_the_resume(tmp_path: Path) -> None:
    cfg = _batch(tmp_path, "gated", max_concurrent=1)
    out = tmp_path / "out"

    def interrupt() -> None:  # once r3 blocks, r1 and r2 have ended: stop the runner
        if wait_until(lambda: any(tmp_path.glob("started-add-1-2--gated--r3*")), within=30):
            os.kill(os.getpid(), signal.SIGINT)

    killer = threading.Thread(target=interrupt)
    killer.start()
    try:
        first = execute(cfg, out)
    finally:
        killer.join()
    assert first.stopped == "interrupted"
    assert not any("group_rewards" in r for r in _records(out))  # the group is not whole
    (tmp_path / "gate").write_text("open")
    second = resume(out, retry_errors=True)
    assert second.counts == {"completed": 4}
    records = _records(out)
    assert all(r["group_rewards"]["best_of_n"] == 1.0 for r in records)
    mean = sum(r["reward"] for r in records) / 4
    assert all(r["advantage"] == pytest.approx(r["reward"] - mean) for r in records)
    assert len({r["id"] for r in records if r["advantage"] > 0}) == 2


def test_group_rewards_with_one_repeat_are_refused_by_the_plan(tmp_path: Path) -> None:
    workspace(tmp_path, ROW, env_extra=GROUPED)
    cfg = write_config(tmp_path, config(expected_rollouts=1))
    checked = plan(cfg)
    assert not checked.ok
    reason = checked.check("environment").reason
    assert "group rewards (best_of_n, rank)" in reason and "repeats >= 2" in reason
    assert json.loads(checked.to_json())["ok"] is False
