"""Records: the plain values every layer above passes around.

`Task` (a row: environment, template id, args), `Grade` (reward, subscores, info) and
the `Trace` of `Step`s a rollout leaves behind, with `RunError` and `JobStats`. This
package imports only proctor's leaves, so the environment, the wire, the runtimes
and the engine can all share it; `Task` (pydantic) loads when first touched.
"""

from __future__ import annotations

from .._public import lazy_exports

TYPE_CHECKING = False  # typing's constant, without importing typing (mypy reads it so)

_EXPORTS = {
    "Grade": "._records",
    "JobStats": "._records",
    "RunError": "._records",
    "Step": "._records",
    "StepKind": "._records",
    "SubScore": "._records",
    "Task": "._task",
    "Trace": "._records",
    "args_digest": "._task",
}
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

if TYPE_CHECKING:
    from ._records import Grade, JobStats, RunError, Step, StepKind, SubScore, Trace
    from ._task import Task, args_digest
else:
    __getattr__, __dir__ = lazy_exports(__name__, _EXPORTS)
