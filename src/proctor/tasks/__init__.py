"""Tasksets: `Taskset` (files, filters, slugs), its `run` front for the engine,
`validate` (rows fit their environments; with `oracle`, tasks are sound), `row_places`
(where each row is in its file), and `diff` / `sync` between two task sources."""

from __future__ import annotations

from .._public import lazy_exports

TYPE_CHECKING = False  # typing's constant, without importing typing (mypy reads it so)

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
_EXPORTS = {
    "SyncPlan": "._sync",
    "TaskCheck": "._validate",
    "Taskset": "._taskset",
    "ValidationReport": "._validate",
    "diff": "._sync",
    "row_places": "._row_places",
    "sync": "._sync",
    "validate": "._validate",
}

if TYPE_CHECKING:
    from ._row_places import row_places
    from ._sync import SyncPlan, diff, sync
    from ._taskset import Taskset
    from ._validate import TaskCheck, ValidationReport, validate
else:
    __getattr__, __dir__ = lazy_exports(
        __name__,
        _EXPORTS,
        deprecated={"Task": "proctor.records.Task", "args_digest": "proctor.records.args_digest"},
    )
