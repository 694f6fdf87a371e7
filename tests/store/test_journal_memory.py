"""The journal's memory does not grow with the rollouts it recorded: it keeps no id of
an ended rollout, and still writes each attempt once."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from proctor import StoreError
from proctor.store import BatchStore, _store, list_rollouts, read_rollout
from proctor.store._journal import IdFilter


@dataclass(frozen=True)
class Assignment:
    rollout_id: str
    task: str
    agent: str | None = "scripted"
    model: str | None = "m"
    repeat: int = 0


def _strings(obj: Any, seen: set[int]) -> set[str]:
    """Every str reachable from `obj` through containers and instance attributes."""
    if id(obj) in seen:
        return set()
    seen.add(id(obj))
    if isinstance(obj, str):
        return {obj}
    if isinstance(obj, (bytes, bytearray, int, float, type(None))):
        return set()
    out: set[str] = set()
    if isinstance(obj, dict):
        for k, v in obj.items():
            out |= _strings(k, seen) | _strings(v, seen)
    elif isinstance(obj, (list, tuple, set, frozenset)):
        for v in obj:
            out |= _strings(v, seen)
    elif hasattr(obj, "__dict__") and type(obj).__module__.startswith("proctor."):
        out |= _strings(vars(obj), seen)
    return out


def test_the_journal_keeps_no_id_of_an_ended_rollout(tmp_path: Path) -> None:
    plan = [Assignment(f"t{i:04d}.a.r0", f"t{i:04d}") for i in range(500)]
    with BatchStore.create(tmp_path / "out", {}) as store:
        store.add_assignments(plan)
        for a in plan:
            store.begin(a).finish("completed", phase="done", reward=1.0)
        store.flush()  # (ids wait in the pending changes only until the index has them)
        held = _strings(store, set())
        assert not held & {a.rollout_id for a in plan}
        with pytest.raises(StoreError, match="already ended"):
            store.begin(plan[123])  # an ended attempt is still never redone
        store.amend(plan[7], advantage=0.5)
        store.begin(plan[9], attempt=2).finish("completed", reward=0.0)
    assert read_rollout(tmp_path / "out", plan[7].rollout_id)["record"]["advantage"] == 0.5
    retried = read_rollout(tmp_path / "out", plan[9].rollout_id)
    assert retried["record"]["attempt"] == 2 and retried["attempts"] == [1]


def test_a_filter_that_answers_present_wrongly_costs_only_a_look_at_the_index(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(IdFilter, "__contains__", lambda self, key: True)
    plan = [Assignment(f"t{i}", f"t{i}") for i in range(3)]
    with BatchStore.create(tmp_path / "out", {}) as store:
        store.add_assignments(plan)
        for a in plan:
            store.begin(a).finish("completed", reward=1.0)
    for a in plan:
        got = read_rollout(tmp_path / "out", a.rollout_id)
        assert got["record"]["status"] == "completed" and got["record"]["attempt"] == 1


def test_the_filter_never_forgets_an_id() -> None:
    ids = [f"rollout-{i}" for i in range(20_000)]
    seen = IdFilter()
    assert "rollout-0" not in seen
    for rid in ids:
        seen.add(rid)
    assert all(rid in seen for rid in ids)
    wrong = sum(f"other-{i}" in seen for i in range(20_000))
    assert wrong < 20  # ~1 in 100,000 at this fill


def test_the_plan_is_added_in_chunks_each_id_once(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(_store, "_ADD_CHUNK", 3)
    plan = [Assignment(f"t{i}", f"t{i}") for i in range(8)]
    twice = [plan[0], plan[1], plan[0], *plan[2:5], plan[1], plan[4], *plan[5:], plan[2]]
    with BatchStore.create(tmp_path / "out", {}) as store:
        assert store.add_assignments(twice) == 8
        assert store.add_assignments(plan) == 0  # (a resumed runner passes it again)
        assert store.add_assignments([*plan, Assignment("t8", "t8")]) == 1
    got = list_rollouts(tmp_path / "out", order_by="seq")
    assert [r["id"] for r in got] == [f"t{i}" for i in range(9)]
    assert [r["seq"] for r in got] == list(range(9))
