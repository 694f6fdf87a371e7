"""The store's named reader API on a real output folder: the queries the dashboard,
the report and resume run, through `proctor.store` only (no SQL outside it)."""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

import pytest

from proctor import CorruptIndexError, StoreError
from proctor.store import (
    BatchStore,
    RolloutQuery,
    cell_means,
    cost_by_model,
    cost_curve,
    count_rollouts,
    distinct_values,
    group_reward_histograms,
    index_row,
    list_rollouts,
    page_rollouts,
    read_record,
    recorded_cost,
    reward_histogram,
    rollout_columns,
    task_means,
    totals,
)


@dataclass(frozen=True)
class Planned:
    rollout_id: str
    task: str
    agent: str | None
    model: str | None
    repeat: int = 0


# (id, task, agent, model, repeat, outcome, reward, cost, started, ended)
ROWS = [
    ("t1-a-0", "t1", "a", "m1", 0, "completed", 1.0, 0.10, 100.0, 110.0),
    ("t1-a-1", "t1", "a", "m1", 1, "completed", 0.0, 0.20, 101.0, 120.0),
    ("t2-a-0", "t2", "a", "m1", 0, "completed", 0.5, 0.30, 102.0, 130.0),
    ("t1-b-0", "t1", "b", "m2", 0, "completed", 1.0, None, 103.0, 140.0),
    ("t2-b-0", "t2", "b", "m2", 0, "failed", None, 0.05, 104.0, 150.0),
    ("t3-b-0", "t3", "b", "m2", 0, None, None, None, None, None),  # still queued
]


@pytest.fixture(scope="module")
def out(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A small output folder written as a runner writes it, then closed."""
    path = tmp_path_factory.mktemp("queries") / "out"
    plans = [Planned(r[0], r[1], r[2], r[3], r[4]) for r in ROWS]
    with BatchStore.create(path, {"pricing": {"m1": {}}}) as store:
        store.add_assignments(plans)
        for plan, (*_, outcome, reward, cost, started, ended) in zip(plans, ROWS, strict=True):
            if outcome is None:
                continue
            rec = store.begin(plan, started_at=started)
            error = {"phase": "agent", "type": "Boom"} if outcome == "failed" else None
            rec.finish(outcome, reward=reward, cost=cost, ended_at=ended, error=error)
    return path


def _ids(rows: list[dict[str, object]]) -> list[object]:
    return [r["id"] for r in rows]


def test_list_rollouts_takes_a_query_or_its_fields_as_keywords(out: Path) -> None:
    by_query = list_rollouts(out, RolloutQuery(agent="b", order_by="seq", descending=True))
    assert _ids(by_query) == ["t3-b-0", "t2-b-0", "t1-b-0"]
    assert list_rollouts(out, agent="b", descending=True) == by_query
    # keywords replace the query's fields
    assert _ids(list_rollouts(out, RolloutQuery(agent="b"), agent="a", limit=1)) == ["t1-a-0"]
    assert _ids(list_rollouts(out, ended=False)) == ["t3-b-0"]
    assert len(list_rollouts(out, limit=None)) == len(ROWS)
    with pytest.raises(TypeError):
        list_rollouts(out, colour="red")


def test_a_query_names_a_bad_sort_column_at_once() -> None:
    with pytest.raises(ValueError, match="cannot sort by 'nope'"):
        RolloutQuery(order_by="nope")
    with pytest.raises(ValueError, match="offset"):
        RolloutQuery(offset=-1)


def test_counts_and_a_page_with_its_total(out: Path) -> None:
    assert count_rollouts(out, by="agent") == {"a": 3, "b": 3}
    assert count_rollouts(out, by="status", agent="b") == {"completed": 1, "failed": 1, "queued": 1}
    page = page_rollouts(out, RolloutQuery(task=["t1", "t2"], order_by="reward", limit=2))
    assert page.total == 5
    assert _ids(page.rows) == ["t2-b-0", "t1-a-1"]  # NULL sorts first, then 0.0
    page = page_rollouts(out, RolloutQuery(id_contains="-a-", reward_min=0.5, reward_max=1.0))
    assert (page.total, _ids(page.rows)) == (2, ["t1-a-0", "t2-a-0"])


def test_totals_over_the_batch(out: Path) -> None:
    t = totals(out)
    assert (t.total, t.ended, t.graded, t.max_repeat) == (6, 5, 4, 1)
    assert t.mean_reward == pytest.approx(2.5 / 4)
    assert t.cost == pytest.approx(0.65)
    assert (t.first_start, t.last_end) == (100.0, 150.0)
    assert recorded_cost(out) == pytest.approx(0.65)


def test_aggregates_by_model_agent_and_task(out: Path) -> None:
    assert cost_by_model(out) == pytest.approx({"m1": 0.6, "m2": 0.05})
    assert distinct_values(out, "agent") == ["a", "b"]
    with pytest.raises(ValueError, match="no column"):
        distinct_values(out, "agent; DROP TABLE rollouts")
    cells = cell_means(out, limit=3)
    assert [(c["task"], c["agent"], c["mean_reward"], c["graded"], c["total"]) for c in cells] == [
        ("t1", "a", 0.5, 2, 2),
        ("t1", "b", 1.0, 1, 1),
        ("t2", "a", 0.5, 1, 1),
    ]
    assert task_means(out) == {"t1": (2 / 3, 3, 3), "t2": (0.5, 1, 2), "t3": (None, 0, 1)}


def test_reward_histograms(out: Path) -> None:
    assert reward_histogram(out, bins=2) == {"lo": 0.0, "hi": 1.0, "counts": [1, 3]}
    by_agent = group_reward_histograms(out, "agent", bins=2, limit=1)
    assert by_agent == {"lo": 0.0, "hi": 1.0, "groups": {"a": [1, 2]}, "more": 1}
    with pytest.raises(ValueError, match="cannot group"):
        group_reward_histograms(out, "status", bins=2, limit=5)


def test_cost_curve_is_cumulative_by_end_time(out: Path) -> None:
    curve = cost_curve(out, points=200)
    assert [t for t, _ in curve] == [110.0, 120.0, 130.0, 140.0, 150.0]
    assert [c for _, c in curve] == pytest.approx([0.1, 0.3, 0.6, 0.6, 0.65])
    assert len(cost_curve(out, points=2)) == 2


def test_columns_rows_and_records(out: Path) -> None:
    ended = rollout_columns(out, ("id", "agent"), RolloutQuery(ended=True, limit=None))
    assert ended == [(r[0], r[2]) for r in ROWS if r[5] is not None]
    row = index_row(out, "t2-b-0")
    assert row is not None
    assert (row["status"], row["error_phase"], row["error_type"]) == ("failed", "agent", "Boom")
    assert index_row(out, "nope") is None
    assert read_record(out, "t1-a-0")["reward"] == 1.0
    assert read_record(out, "t3-b-0") == {}  # queued: no record yet
    with pytest.raises(ValueError, match="bad rollout id"):
        read_record(out, "../batch")


def test_an_earlier_attempt_is_read_from_where_a_retry_moved_it(tmp_path: Path) -> None:
    plan = Planned("r", "t", None, None)
    with BatchStore.create(tmp_path / "out", {}) as store:
        store.add_assignments([plan])
        store.begin(plan).finish("failed", error={"phase": "agent", "type": "X"})
        store.begin(plan, attempt=2).finish("completed", reward=1.0)
    assert read_record(tmp_path / "out", "r")["attempt"] == 2
    assert read_record(tmp_path / "out", "r", attempt=1)["status"] == "failed"


def test_readers_see_a_batch_while_it_is_written(tmp_path: Path) -> None:
    plan = Planned("r", "t", "a", "m")
    with BatchStore.create(tmp_path / "out", {}) as store:
        store.add_assignments([plan])
        store.begin(plan).finish("completed", reward=0.25)
        store.flush()
        assert totals(tmp_path / "out").mean_reward == 0.25
        assert page_rollouts(tmp_path / "out", RolloutQuery()).total == 1


def test_an_index_that_is_a_link_is_not_followed(out: Path, tmp_path: Path) -> None:
    fake = tmp_path / "fake"
    fake.mkdir()
    (fake / "batch.json").write_text('{"layout_version": 1}')
    os.symlink(out / "index.sqlite", fake / "index.sqlite")
    for read in (lambda: totals(fake), lambda: list_rollouts(fake), lambda: index_row(fake, "r")):
        with pytest.raises(StoreError, match="links are not followed"):
            read()


def test_a_damaged_index_is_one_line_naming_what_rebuilds_it(tmp_path: Path) -> None:
    out = tmp_path / "out"
    BatchStore.create(out, {}).close()
    (out / "index.sqlite").write_bytes(b"not a database at all" * 300)
    with pytest.raises(CorruptIndexError) as info:
        page_rollouts(out, RolloutQuery())
    assert str(info.value).count("\n") == 0
    assert f"`proctor batch --resume {out}` or `proctor batch report {out}`" in str(info.value)
