"""`RecordedRollouts` (in-memory agents recorded into a batch folder, what `proctor run`
runs) and `row_problems` (rows checked against their environment before anything runs)."""

from __future__ import annotations

import uuid
from pathlib import Path

import pytest

from proctor import Environment
from proctor.agents import Run, agent_from_fn
from proctor.batch import Assignment, RecordedRollouts, rollout_id, row_problems
from proctor.engine import Planned, RunSpec, Timeouts
from proctor.records import Task
from proctor.runtimes import LocalRuntime
from proctor.store import list_rollouts, read_batch
from proctor.tasks import Taskset

SECRET = "s3cret-value-in-a-row"
env = Environment("recorded-echo")


@env.template
async def echo(text: str):
    answer = yield f"Say {text}"
    yield 1.0 if answer == text else 0.0


async def parrot(prompt: str) -> str:
    return prompt.split()[-1]


def _plan(rows: list[Task], repeats: int) -> tuple[list[Planned], list[Assignment]]:
    planned, assignments = [], []
    for task in rows:
        group = uuid.uuid4().hex
        for k in range(1, repeats + 1):
            rid = rollout_id(task.slug, "parrot", k)
            planned.append(Planned(task, group, trace_id=f"{rid}.1"))
            assignments.append(Assignment(rid, task.slug, "parrot", None, k, enabled=True))
    return planned, assignments


async def test_every_rollout_is_recorded_grouped_and_redacted(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("RECORDED_TEST_TOKEN", SECRET)
    planned, assignments = _plan([echo(text=SECRET), echo(text="hello")], repeats=2)
    heard: list[Run] = []
    out = tmp_path / "out"
    async with LocalRuntime(env) as runtime:
        spec = RunSpec(planned, {"": agent_from_fn(parrot)}, runtime, "job-1", Timeouts(), 2)
        rollouts = RecordedRollouts(
            spec, assignments, output_dir=str(out), meta={"name": "t"}, on_run=heard.append
        )
        await rollouts.run()
    assert len(heard) == 4 and all(r.reward == 1.0 and r.advantage == 0.0 for r in heard)
    assert [r.trace_id for r in rollouts.runs if r] == [p.trace_id for p in planned]
    rows = list(list_rollouts(str(out), limit=None))
    assert sorted(r["status"] for r in rows) == ["completed"] * 4
    assert read_batch(str(out))["runner"]["pid"] > 0  # reconcile can find this runner
    written = b"".join(p.read_bytes() for p in out.rglob("*") if p.suffix in (".json", ".jsonl"))
    assert SECRET.encode() not in written and b"hello" in written


async def test_without_an_output_dir_nothing_is_written(tmp_path: Path) -> None:
    planned, assignments = _plan([echo(text="a")], repeats=1)
    async with LocalRuntime(env) as runtime:
        spec = RunSpec(planned, {"": agent_from_fn(parrot)}, runtime, "job-2")
        rollouts = RecordedRollouts(spec, assignments)
        await rollouts.run()
    (run,) = rollouts.runs
    assert run is not None and run.reward == 1.0 and rollouts.wall_s > 0
    with pytest.raises(ValueError, match="one assignment per planned rollout"):
        RecordedRollouts(spec, [])


async def test_row_problems_names_each_row_that_does_not_fit() -> None:
    rows = [
        echo(text="fine"),
        Task(env="recorded-echo", id="nope", args={}),
        Task(env="recorded-echo", id="echo", args={"text": "x", "extra": 1}),
    ]
    problems = await row_problems(Taskset("t", rows), served=env)
    assert sorted(problems) == sorted(r.slug for r in rows[1:])
    assert "no template 'nope'" in problems[rows[1].slug]
    with pytest.raises(ValueError, match="needs served, url or sources"):
        await row_problems(Taskset("t", rows))
