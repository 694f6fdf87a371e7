"""Task rows and tasksets: `Task`, `Taskset` and the slug digest `args_digest`."""

from ._task import Task, args_digest
from ._taskset import Taskset

__all__ = ["Task", "Taskset", "args_digest"]
