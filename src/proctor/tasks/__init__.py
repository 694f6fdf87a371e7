"""Tasksets: `Taskset` (files, filters, slugs), its `run` front for the engine, and
`validate` (rows fit their environments; with `oracle`, tasks are sound)."""

from .._public import publish
from ._taskset import Taskset
from ._validate import TaskCheck, ValidationReport, validate

__all__ = ["TaskCheck", "Taskset", "ValidationReport", "validate"]

publish(globals(), __all__, __name__)
