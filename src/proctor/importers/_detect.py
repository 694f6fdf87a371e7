"""`detect(path)`: a foreign task source recognized, as rows, an environment and a runtime."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

from ._harbor import harbor_tasks, task_dirs
from ._source import Source

__all__ = ["detect", "harbor_source"]


def detect(
    path: str | os.PathLike[str], *, limit: int | None = None, **options: Any
) -> Source | None:
    """The foreign task source at `path`, or None when it is none proctor imports.

    Recognized: a Harbor / Terminal-Bench task directory or a folder of them
    (`task.toml` and `instruction.md`), an OpenEnv environment folder
    (`openenv.yaml`), a verifiers environment package (or its project folder), and an
    Inspect AI task file (a `.py` importing inspect_ai with a `@task`). `options` go
    to the importer (`harbor_source`, `openenv_source`, `verifiers_source`,
    `inspect_source`). `limit`: at most this many rows (the first ones; a verifiers
    taskset without end needs one).

    Raises:
        ValueError: the source is recognized but malformed (the message names it).
        ImportError: a verifiers or Inspect source without an interpreter for it
            (the message says where it looked and how to install one).
    """
    found = _detect(Path(path), limit, options)
    if found is not None and limit is not None:
        found.rows = found.rows[:limit]
    return found


def _detect(folder: Path, limit: int | None, options: dict[str, Any]) -> Source | None:
    if folder.is_file():
        from ._inspect_source import inspect_source, is_inspect_file

        return inspect_source(folder, **options) if is_inspect_file(folder) else None
    if not folder.is_dir():
        return None
    if task_dirs(folder):
        return harbor_source(folder, **options)
    if (folder / "openenv.yaml").is_file():
        from ._openenv import openenv_source

        return openenv_source(folder, **options)
    from ._verifiers_source import is_verifiers_package, verifiers_source

    if is_verifiers_package(folder):
        return verifiers_source(folder, limit=limit, **options)
    return None


def harbor_source(path: str | os.PathLike[str], *, oracle: bool = False, **runtime: Any) -> Source:
    """Harbor rows (`harbor_tasks`) with the `harbor` environment and a `HarborRuntime`.

    Args:
        path: a task directory or a folder of them.
        oracle: rows that run the reference solution first (see `harbor_tasks`).
        runtime: `HarborRuntime` options (engine, network, oci_runtime, ...).
    """
    from ._harbor_runtime import HARBOR_SOURCE, HarborRuntime

    rows = harbor_tasks(path, oracle=oracle)
    return Source("harbor", rows, HARBOR_SOURCE, HarborRuntime(**runtime))
