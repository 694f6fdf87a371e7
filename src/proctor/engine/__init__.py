"""The engine: rollouts, batches of them, and what they record."""

from ._job import Job
from ._ray_executor import RayExecutor
from ._records import Grade, JobStats, RunError, Step, StepKind, Trace
from ._rollout import default_runtime, rollout, run_taskset
from ._run import Run, RunStatus
from ._timeouts import Timeouts

__all__ = [
    "Grade",
    "Job",
    "JobStats",
    "RayExecutor",
    "Run",
    "RunError",
    "RunStatus",
    "Step",
    "StepKind",
    "Timeouts",
    "Trace",
    "default_runtime",
    "rollout",
    "run_taskset",
]
