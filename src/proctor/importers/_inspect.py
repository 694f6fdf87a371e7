"""`python -m proctor.importers._inspect rows|serve FILE`, run where inspect_ai is installed.

`rows` prints the samples of the file's `@task`s as proctor rows (JSONL); `serve`
serves them as a proctor environment. `inspect_source` (in the driver) runs both
(`_foreign`).
"""

from __future__ import annotations

import sys
from typing import Any

from ..env import Environment
from ..records import Task
from ._foreign import child_main

__all__ = ["main"]


def _rows(target: str, options: dict[str, Any]) -> list[Task]:
    from ._inspect_env import inspect_rows, load_tasks

    return inspect_rows(target, load_tasks(target, options.get("task_args")))


def _environment(target: str, options: dict[str, Any]) -> Environment:
    from ._inspect_env import inspect_environment, load_tasks

    return inspect_environment(target, load_tasks(target, options.get("task_args")))


def main(argv: list[str] | None = None) -> int:
    """The child's entry point."""
    return child_main(argv, "proctor.importers._inspect", _rows, _environment)


if __name__ == "__main__":
    sys.exit(main())
