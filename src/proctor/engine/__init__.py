"""The engine: one rollout, a pool of them, and the `Job` that collects their runs."""

from __future__ import annotations

from .._public import lazy_exports

TYPE_CHECKING = False  # typing's constant, without importing typing (mypy reads it so)

__all__ = [
    "Adoption",
    "Job",
    "Planned",
    "RayExecutor",
    "Repeats",
    "RolloutObserver",
    "RunSink",
    "RunSpec",
    "RunSummary",
    "Timeouts",
    "apply_group_rewards",
    "check_group_rewards",
    "default_runtime",
    "execute_run",
    "for_each",
    "rollout",
    "run_taskset",
]
_EXPORTS = {
    "Adoption": "._drive",
    "Job": "._job",
    "Planned": "._spec",
    "RayExecutor": "._ray_executor",
    "Repeats": "._spec",
    "RolloutObserver": "._events",
    "RunSink": "._collect",
    "RunSpec": "._spec",
    "RunSummary": "._summary",
    "Timeouts": "._timeouts",
    "apply_group_rewards": "._groups",
    "check_group_rewards": "._groups",
    "default_runtime": "._drive",
    "execute_run": "._drive",
    "for_each": "._pool",
    "rollout": "._drive",
    "run_taskset": "._pool",
}

if TYPE_CHECKING:
    from ._collect import RunSink
    from ._drive import Adoption, default_runtime, execute_run, rollout
    from ._events import RolloutObserver
    from ._groups import apply_group_rewards, check_group_rewards
    from ._job import Job
    from ._pool import for_each, run_taskset
    from ._ray_executor import RayExecutor
    from ._spec import Planned, Repeats, RunSpec
    from ._summary import RunSummary
    from ._timeouts import Timeouts
else:
    __getattr__, __dir__ = lazy_exports(
        __name__,
        _EXPORTS,
        deprecated={  # exported from here before 0.1; their homes are records and agents
            "Grade": "proctor.records.Grade",
            "JobStats": "proctor.records.JobStats",
            "RunError": "proctor.records.RunError",
            "Step": "proctor.records.Step",
            "StepKind": "proctor.records.StepKind",
            "Trace": "proctor.records.Trace",
            "Run": "proctor.agents.Run",
            "RunStatus": "proctor.agents.RunStatus",
        },
    )
