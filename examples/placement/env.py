"""A Harbor-style task served where the harness is placed (docs/placement.md).

The task folder `task/` holds what a Harbor task ships: `instruction.md` (the prompt),
`workspace/` (the files the agent works on, copied to `/tmp/workspace` at start) and
`tests/` (the check, run at grading). The harness (`harness.py`) runs inside the same
sandbox or container and edits the files where they are.
"""

from __future__ import annotations

import importlib.util
import shutil
import tempfile
from pathlib import Path

from proctor import Environment, Taskset

TASK = Path(__file__).resolve().parent / "task"
WORK = Path(tempfile.gettempdir()) / "workspace"  # where the task's files are

env = Environment("placement", version="1")
env.add_shell()


def _check() -> object:
    spec = importlib.util.spec_from_file_location("check", TASK / "tests" / "check.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@env.template
async def fix_typo():
    """Copy the workspace in, prompt with the instruction, grade with the task's test."""
    shutil.rmtree(WORK, ignore_errors=True)
    shutil.copytree(TASK / "workspace", WORK)
    answer = yield (TASK / "instruction.md").read_text()
    del answer  # the work is graded, not what the harness said
    yield _check().score(WORK)  # type: ignore[attr-defined]


tasks = Taskset("placement", [fix_typo()])
