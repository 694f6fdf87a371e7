"""The `coding` rows, one per bug, each verified by running its tests in the substrate.

`proctor run examples/coding/tasks.py --agent examples/coding/solver.py:solve` runs
them offline. The sibling import works because the loader puts this folder on
`sys.path`.
"""

from __future__ import annotations

from env import BUGS, coding, row
from proctor import Taskset

__all__ = ["coding", "tasks"]

tasks = Taskset("coding", [row(bug) for bug in BUGS])
