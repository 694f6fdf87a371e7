"""Records: the plain values every layer above passes around.

`Task` (a row: environment, template id, args), `Grade` (reward, subscores, info) and
the `Trace` of `Step`s a rollout leaves behind, with `RunError` and `JobStats`. This
package imports only proctor's leaves, so the environment, the wire, the runtimes
and the engine can all share it; `Task` (pydantic) loads when first touched.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from .._public import publish
from ._records import Grade, JobStats, RunError, Step, StepKind, SubScore, Trace

if TYPE_CHECKING:
    from ._task import Task, args_digest

__all__ = [
    "Grade",
    "JobStats",
    "RunError",
    "Step",
    "StepKind",
    "SubScore",
    "Task",
    "Trace",
    "args_digest",
]


def __getattr__(name: str) -> Any:
    if name in ("Task", "args_digest"):
        from . import _task

        value = getattr(_task, name)
        globals()[name] = value
        return value
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


publish(globals(), __all__, __name__)
