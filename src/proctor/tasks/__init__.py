"""Tasksets: `Taskset` (files, filters, slugs) and its `run` front for the engine."""

from ._taskset import Taskset

__all__ = ["Taskset"]
