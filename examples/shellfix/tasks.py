"""Three `shellfix` rows, one per bug, and the offline agent that solves them.

`proctor run examples/shellfix/tasks.py` runs them with `OfflineAgent` (a `ToolAgent`
on a scripted fake model); add `--runtime subprocess` to serve each rollout's
environment in its own process. The sibling imports work because the loader puts
this folder on `sys.path`.
"""

from __future__ import annotations

from policy import OfflineAgent as agent

from env import BUGS, fix, shellfix
from proctor import Taskset

__all__ = ["agent", "shellfix", "tasks"]

tasks = Taskset("shellfix", [fix(bug=name) for name in BUGS])
