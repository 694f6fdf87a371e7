"""The engine: one rollout, a taskset of them, and the `Job` that collects their runs."""

from .._public import publish
from ._job import Job
from ._ray_executor import RayExecutor
from ._rollout import Adoption, default_runtime, rollout, run_taskset
from ._timeouts import Timeouts

__all__ = [
    "Adoption",
    "Job",
    "RayExecutor",
    "Timeouts",
    "default_runtime",
    "rollout",
    "run_taskset",
]

publish(globals(), __all__, __name__)
