"""`python -m proctor.importers._verifiers rows|serve PKG`, run where verifiers is installed.

`rows` prints the package's tasks as proctor rows (JSONL); `serve` serves them as a
proctor environment. `--options JSON` holds `taskset` (the taskset config's fields)
and `limit` (at most this many rows), both optional. `verifiers_source` (in the
driver) runs both (`_foreign`).
"""

from __future__ import annotations

import sys
from typing import Any

from ..env import Environment
from ..records import Task
from ._foreign import child_main

__all__ = ["main"]


def _rows(target: str, options: dict[str, Any]) -> list[Task]:
    from ._verifiers_env import load_taskset, verifiers_rows

    taskset = load_taskset(target, **options.get("taskset", {}))
    return verifiers_rows(taskset, options.get("limit"))


def _environment(target: str, options: dict[str, Any]) -> Environment:
    from ._verifiers_env import load_taskset, verifiers_environment

    return verifiers_environment(load_taskset(target, **options.get("taskset", {})))


def main(argv: list[str] | None = None) -> int:
    """The child's entry point."""
    return child_main(argv, "proctor.importers._verifiers", _rows, _environment)


if __name__ == "__main__":
    sys.exit(main())
