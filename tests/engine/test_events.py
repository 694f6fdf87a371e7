"""A rollout's phase changes reach the observers its caller registers, from the driver."""

from __future__ import annotations

import pickle

from _support.echo_env import make_echo_env
from proctor.agents import Run, agent_from_fn
from proctor.engine import execute_run
from proctor.runtimes import LocalRuntime

env = make_echo_env("engine-events")
solver = agent_from_fn(lambda prompt: prompt)


class Heard:
    def __init__(self, refuse: str | None = None) -> None:
        self.seen: list[tuple[str, str]] = []  # (the phase told, the run's phase meanwhile)
        self.refuse = refuse

    def phase_changed(self, run: Run, phase: str) -> None:
        self.seen.append((phase, run.phase))
        if phase == self.refuse:
            raise ConnectionError("the recorder is gone")


async def test_every_observer_hears_each_phase_before_the_run_enters_it() -> None:
    first, second = Heard(), Heard()
    run = Run(env.tasks["echo"](text="hi"))
    await execute_run(run, solver, runtime=LocalRuntime(env), observers=(first, second))
    assert run.status == "completed" and run.reward == 1.0
    told = [phase for phase, _ in first.seen]
    assert told == ["provisioning", "connecting", "starting", "agent", "grading", "teardown"]
    assert [was for _, was in first.seen][1:] == told[:-1]  # told before the change
    assert second.seen == first.seen


async def test_an_observer_that_fails_keeps_the_run_where_it_was() -> None:
    run = Run(env.tasks["echo"](text="hi"))
    await execute_run(run, solver, runtime=LocalRuntime(env), observers=(Heard("grading"),))
    assert run.status == "failed" and run.error is not None
    assert (run.error.phase, run.error.type) == ("agent", "ConnectionError")


async def test_a_driven_run_pickles_as_it_is() -> None:
    # A Ray shard sends its run back: no hook of the shard's process rides along.
    run = Run(env.tasks["echo"](text="hi"), job_id="j", group_id="g", trace_id="t")
    await execute_run(run, solver, runtime=LocalRuntime(env), observers=(Heard(),))
    copy = pickle.loads(pickle.dumps(run))
    assert (copy.phase, copy.job_id, copy.group_id, copy.trace_id) == ("teardown", "j", "g", "t")
    assert copy.reward == 1.0 and copy.answer == "hi"
