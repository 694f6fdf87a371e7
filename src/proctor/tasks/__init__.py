"""Tasksets: `Taskset` (files, filters, slugs), its `run` front for the engine,
`validate` (rows fit their environments; with `oracle`, tasks are sound), `row_places`
(where each row is in its file), and `diff` / `sync` between two task sources."""

from .._public import publish
from ._row_places import row_places
from ._sync import SyncPlan, diff, sync
from ._taskset import Taskset
from ._validate import TaskCheck, ValidationReport, validate

__all__ = [
    "SyncPlan",
    "TaskCheck",
    "Taskset",
    "ValidationReport",
    "diff",
    "row_places",
    "sync",
    "validate",
]

publish(
    globals(),
    __all__,
    __name__,
    deprecated={"Task": "proctor.records.Task", "args_digest": "proctor.records.args_digest"},
)
