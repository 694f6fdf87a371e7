"""A simulated user's model turns are durable as they come (`user_turns.jsonl`): a
runner that takes over a rollout (`resume_turns`) counts the turns the dead runner's
session served in the record's usage and cost, and the batch report prices each once.

The kill -9 and `--resume` of a real batch is tests/users/test_user_resume_batch.py;
here the recorder is driven directly, as the user-model session and the proxy drive it.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import pytest

from proctor.agents import Run
from proctor.batch import Assignment, BatchStore
from proctor.batch._recording import Recording
from proctor.batch._report import report
from proctor.batch._tally import Tally
from proctor.engine._users import _UserSteps
from proctor.records import Step, Task
from proctor.store import read_record, read_rollout

PRICE = {"input": 2.0, "output": 8.0, "cached_input": 0.5, "cache_write": 2.5}
PRICING = {"openai/small": {"model": "small-2025", "price": PRICE}}


def _usage(inp: int, out: int) -> dict[str, int]:
    return {"input_tokens": inp, "output_tokens": out, "total_tokens": inp + out}


def _cost(inp: int, out: int) -> float:
    return (inp * PRICE["input"] + out * PRICE["output"]) / 1e6


def _turn(n: int, inp: int, out: int, **extra: Any) -> dict[str, Any]:
    request = {"messages": [{"role": "user", "content": "hello"}]}
    return {"turn": n, "api": "chat", "model": "small-2025", "status": "ok",
            "usage": _usage(inp, out), "cost": _cost(inp, out), "request": request,
            **extra}  # fmt: skip


def _assign(rid: str) -> Assignment:
    return Assignment(rollout_id=rid, task="t", agent="a", model="openai/small", repeat=1,
                      enabled=True)  # fmt: skip


def _runner(store: BatchStore, rid: str) -> tuple[Run, Recording, Tally]:
    """One runner's take on rollout `rid` (attempt 1: the second continues it)."""
    run = Run(Task(env="e", id="t"), trace_id=f"{rid}.1")
    tally = Tally(1)
    return run, Recording(run, store.begin(_assign(rid)), tally), tally


def _user_says(run: Run, turn: dict[str, Any]) -> None:
    """A turn of the user-model session, as the proxy records it on its steps."""
    _UserSteps(run).append(Step("model_turn", "42", turn, 0.0, 0.0))


def test_a_continued_rollout_counts_the_user_turns_the_dead_runner_served(
    tmp_path: Path,
) -> None:
    out = tmp_path / "out"
    with BatchStore.create(out, {"name": "u", "batch_id": "u-1", "pricing": PRICING}) as store:
        run, first, tally = _runner(store, "r1")  # the runner killed -9 mid-dialogue
        first._turn(_turn(1, 1000, 100))
        _user_says(run, _turn(1, 300, 20))
        assert tally.cost_usd == pytest.approx(_cost(1000, 100) + _cost(300, 20))
        [line] = read_rollout(out, "r1")["user_turns"]
        assert "request" not in line and "user" not in line and line["cost"] == _cost(300, 20)

        run, second, tally = _runner(store, "r1")  # the resuming runner
        second.resume_turns()
        second._turn(_turn(1, 2000, 50))
        _user_says(run, _turn(1, 400, 30))
        second.finish("completed")
    assert tally.cost_usd == pytest.approx(_cost(2000, 50) + _cost(400, 30))  # its own
    record = read_record(out, "r1")
    paid = [(1000, 100), (300, 20), (2000, 50), (400, 30)]
    assert record["cost"] == pytest.approx(sum(_cost(i, o) for i, o in paid))
    assert record["usage"]["input_tokens"] == sum(i for i, _ in paid)
    assert record["usage"]["output_tokens"] == sum(o for _, o in paid)
    rollout = read_rollout(out, "r1")
    assert [t["turn"] for t in rollout["model_turns"]] == [1, 2]  # the agent's alone
    assert len(rollout["user_turns"]) == 2
    [row] = report(out)["rollouts"]
    assert row["source"] == "turns"
    assert row["recomputed_cost"] == pytest.approx(record["cost"])  # each turn once
    assert row["tokens"]["input"] == record["usage"]["input_tokens"]


def test_without_proxy_turns_the_record_counts_the_user_turns_once(tmp_path: Path) -> None:
    """An agent whose turns are on its trace alone: the record's usage is the report's."""
    out = tmp_path / "out"
    with BatchStore.create(out, {"name": "u", "batch_id": "u-1", "pricing": PRICING}) as store:
        run, _, _ = _runner(store, "r1")
        _user_says(run, _turn(1, 300, 20))
        run, second, tally = _runner(store, "r1")
        second.resume_turns()
        run.trace.steps.append(Step("model_turn", "hi", _turn(1, 2000, 50)))  # the agent's
        _user_says(run, _turn(1, 400, 30))
        second.finish("completed")
    assert tally.cost_usd == pytest.approx(_cost(2000, 50) + _cost(400, 30))  # once each
    record = read_record(out, "r1")
    paid = [(300, 20), (2000, 50), (400, 30)]
    assert record["cost"] == pytest.approx(sum(_cost(i, o) for i, o in paid))
    [row] = report(out)["rollouts"]
    assert row["source"] == "record"
    assert row["recomputed_cost"] == pytest.approx(record["cost"])


def test_a_rollout_without_a_user_model_writes_no_user_turns(tmp_path: Path) -> None:
    out = tmp_path / "out"
    with BatchStore.create(out, {"name": "u", "batch_id": "u-1", "pricing": PRICING}) as store:
        _, rec, _ = _runner(store, "r1")
        rec._turn(_turn(1, 1000, 100))
        rec.finish("completed")
    assert os.listdir(out / "rollouts" / "r1") == ["model_turns.jsonl"]


def test_the_tally_hears_each_turn_once_a_judges_at_the_end(tmp_path: Path) -> None:
    out = tmp_path / "out"
    with BatchStore.create(out, {"name": "u", "batch_id": "u-1", "pricing": PRICING}) as store:
        run, rec, tally = _runner(store, "r1")
        rec._turn(_turn(1, 1000, 100))
        _user_says(run, _turn(1, 300, 20))
        run.trace.steps.append(Step("model_turn", "ok", {**_turn(1, 500, 10), "judge": True}))
        rec.finish("completed")
    paid = [(1000, 100), (300, 20), (500, 10)]
    assert tally.cost_usd == pytest.approx(sum(_cost(i, o) for i, o in paid))
    assert read_record(out, "r1")["cost"] == pytest.approx(tally.cost_usd)
