"""What a `Job` keeps (issue 25 item 3): runs, summaries or nothing, and a sink that
takes each run as its group ends, so memory need not grow with the job."""

from __future__ import annotations

import asyncio
import weakref
from collections.abc import AsyncGenerator
from typing import Any

import pytest

from proctor import Environment, Run, Taskset
from proctor.engine import Job, RunSink, run_taskset
from proctor.samples import samples_from_job

env = Environment("keeping")


@env.template
async def scored(i: int = 0) -> AsyncGenerator[Any, Any]:
    answer = yield f"#{i}"
    if answer == "crash":
        raise RuntimeError("cannot grade that")
    yield float(answer)


def rows(n: int) -> Taskset:
    return Taskset("keeping", [scored(i=i) for i in range(n)])


async def by_row(run: Run) -> None:
    """Reward 0, 0.5 or 1 by row; every seventh row's grade crashes."""
    i = run.task.args["i"]
    run.answer = "crash" if i % 7 == 6 else str((i % 3) / 2)


async def test_summaries_only_leave_no_run_alive_and_the_sink_gets_each_once() -> None:
    alive: weakref.WeakSet[Run] = weakref.WeakSet()
    seen: list[str] = []
    most = 0

    def note(run: Run) -> None:
        alive.add(run)

    def sink(run: Run) -> None:
        nonlocal most
        assert run.advantage is not None or run.reward is None  # its group has ended
        seen.append(run.trace_id)
        most = max(most, len(alive))

    job = await run_taskset(
        rows(40), by_row, group=3, max_concurrent=4, on_run=note, keep="summaries", sink=sink
    )
    assert len(seen) == len(set(seen)) == 120
    assert not alive and job.runs == []  # none outlives its group
    assert most <= 4 + 3  # the runs in flight and one group held, never the job
    assert sorted(s.id for s in job.summaries) == sorted(seen)
    assert [s.slug for s in job.summaries] == [t.slug for t in rows(40) for _ in range(3)]
    assert len({s.group_id for s in job.summaries}) == 40


async def test_statistics_are_the_same_whatever_is_kept() -> None:
    jobs = {
        keep: await run_taskset(rows(30), by_row, group=2, max_concurrent=5, keep=keep)
        for keep in ("runs", "summaries", "none")
    }
    kept, summaries, none = jobs["runs"], jobs["summaries"], jobs["none"]
    assert kept.stats == summaries.stats == none.stats
    assert kept.stats.runs == 60 and kept.stats.errors_by_phase == {"grading": 8}
    assert kept.stats.mean_reward == pytest.approx(13.5 / 26)  # 26 rows graded, twice
    assert kept.pass_at_k(1) == summaries.pass_at_k(1) == pytest.approx(9 / 30)  # i % 3 == 2
    assert kept.pass_at_k(2, threshold=0.5) == summaries.pass_at_k(2, threshold=0.5)
    assert [s.reward for s in kept.summaries] == [r.reward for r in kept.runs]
    assert [s.advantage for s in kept.summaries] == [r.advantage for r in kept.runs]
    by_summary = summaries.summary_groups().values()
    by_run = kept.groups().values()
    assert [[(s.slug, s.reward, s.error_phase) for s in g] for g in by_summary] == [
        [(r.slug, r.reward, r.error and r.error.phase) for r in g] for g in by_run
    ]
    assert len(none.summaries) == 0 and none.runs == []


async def test_what_a_job_cannot_answer_without_its_runs_is_said() -> None:
    summaries = await run_taskset(rows(2), by_row, group=2, keep="summaries")
    with pytest.raises(ValueError, match=r"kept 0 of its 4 runs.*summary_groups"):
        summaries.groups()
    with pytest.raises(ValueError, match=r"kept 0 of its 4 runs: samples need them"):
        list(samples_from_job(summaries))
    none = await run_taskset(rows(2), by_row, group=2, keep="none")
    with pytest.raises(ValueError, match=r"kept 0 summaries of its 4 runs \(keep='none'\)"):
        none.pass_at_k(1)
    with pytest.raises(ValueError, match=r"pass@3 needs groups of at least 3; group \w+ has 2"):
        summaries.pass_at_k(3)
    with pytest.raises(ValueError, match="keep must be 'runs', 'summaries' or 'none', not 'all'"):
        await run_taskset(rows(1), by_row, keep="all")  # type: ignore[arg-type]
    with pytest.raises(TypeError, match=r"sink must be callable or have an add\(run\) method"):
        await run_taskset(rows(1), by_row, sink=3)  # type: ignore[arg-type]


async def test_an_async_sink_object_is_awaited_for_each_run() -> None:
    class Store:
        def __init__(self) -> None:
            self.ids: list[str] = []

        async def add(self, run: Run) -> None:
            await asyncio.sleep(0)
            self.ids.append(run.trace_id)

    store = Store()
    assert isinstance(store, RunSink)
    job = await rows(5).run(by_row, group=2, keep="none", sink=store)
    assert len(set(store.ids)) == 10 and job.stats.runs == 10


async def test_a_sink_that_raises_stops_the_job_with_its_error() -> None:
    started = 0

    async def counted(run: Run) -> None:
        nonlocal started
        started += 1
        await by_row(run)

    def full(run: Run) -> None:
        raise OSError("No space left on device")

    job = Job("full")
    with pytest.raises(OSError, match="No space left"):
        await run_taskset(rows(50), counted, max_concurrent=2, job=job, keep="none", sink=full)
    assert started < 50  # nothing started once the sink had failed
    assert job.stats.runs == started  # what ended is still counted


async def test_an_interrupted_job_keeps_and_sinks_what_ended() -> None:
    release, three_groups = asyncio.Event(), asyncio.Event()
    sunk: list[Run] = []

    def sink(run: Run) -> None:
        sunk.append(run)
        if len(sunk) == 6:
            three_groups.set()

    async def stuck_on_the_last(run: Run) -> None:
        if run.task.args["i"] == 3:
            await release.wait()
        await by_row(run)

    job = Job("cut")
    task = asyncio.create_task(run_taskset(rows(4), stuck_on_the_last, group=2, job=job, sink=sink))
    async with asyncio.timeout(60):  # the last group's runs are stuck
        await three_groups.wait()
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    assert job.stats.runs == len(job.runs) == len(sunk) == 6
