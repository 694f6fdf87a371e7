"""The engine: one rollout, a pool of them, and the `Job` that collects their runs."""

from .._public import publish
from ._drive import Adoption, default_runtime, execute_run, rollout
from ._events import RolloutObserver
from ._groups import apply_group_rewards, check_group_rewards
from ._job import Job
from ._pool import for_each, run_taskset
from ._ray_executor import RayExecutor
from ._spec import Planned, RunSpec
from ._timeouts import Timeouts

__all__ = [
    "Adoption",
    "Job",
    "Planned",
    "RayExecutor",
    "RolloutObserver",
    "RunSpec",
    "Timeouts",
    "apply_group_rewards",
    "check_group_rewards",
    "default_runtime",
    "execute_run",
    "for_each",
    "rollout",
    "run_taskset",
]

publish(
    globals(),
    __all__,
    __name__,
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
