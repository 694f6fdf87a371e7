"""Tasksets: `Taskset` (files, filters, slugs) and its `run` front for the engine."""

from .._public import publish
from ._taskset import Taskset

__all__ = ["Taskset"]

publish(globals(), __all__, __name__)
