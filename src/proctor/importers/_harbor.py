"""Harbor / Terminal-Bench task directories as proctor rows.

A task directory holds `task.toml`, `instruction.md`, `environment/Dockerfile`,
`tests/test.sh` and (optionally) `solution/solve.sh`. Each becomes one row of the
`harbor` environment (`_harbor_env.py`): the instruction is the prompt, the test and
solution files travel in the row's args (the container gets them only when grading,
or when running the reference solution), and `runtime_config` names the environment
folder `HarborRuntime` builds the image from (and its Compose file, when it ships one),
with the task's resources and deadlines.
"""

from __future__ import annotations

import base64
import os
from pathlib import Path
from typing import Any

from ..records import Task
from ._folder_files import folder_files, read_file, read_text
from ._harbor_toml import HarborConfig, read_config

__all__ = ["COMPOSE_FILES", "HARBOR_ENV", "harbor_tasks", "is_harbor_task", "task_dirs"]

HARBOR_ENV = "harbor"
"""The environment (and template id) every Harbor row names."""
COMPOSE_FILES = ("docker-compose.yaml", "docker-compose.yml", "compose.yaml", "compose.yml")
"""The names of a Compose file in a task's `environment/`, first found first."""


def is_harbor_task(path: Path) -> bool:
    """Whether `path` is a Harbor task directory (`task.toml` and `instruction.md`)."""
    return (path / "task.toml").is_file() and (path / "instruction.md").is_file()


def task_dirs(path: Path) -> list[Path]:
    """`path` itself when it is a task directory, else its task subdirectories by name."""
    if is_harbor_task(path):
        return [path]
    if not path.is_dir():
        return []
    return sorted(child for child in path.iterdir() if is_harbor_task(child))


def harbor_tasks(path: str | os.PathLike[str], *, oracle: bool = False) -> list[Task]:
    """Rows for one Harbor task directory, or for every task directory in a folder.

    Args:
        path: a task directory, or a folder of them (one level deep).
        oracle: rows that run `solution/solve.sh` before the prompt (Harbor's oracle
            agent): any agent, even one doing nothing, is then graded on the
            reference solution's result.

    Raises:
        ValueError: no task directory there, a `task.toml` does not parse or holds a
            value out of range (`read_config`), a task has no `tests/test.sh`, a file
            it carries is not a regular file inside its folder (a symlink out of it,
            a FIFO, ...: `read_file`), or `oracle` and a task has no `solution/solve.sh`.
    """
    dirs = task_dirs(Path(path))
    if not dirs:
        raise ValueError(f"{path}: no Harbor task directory (task.toml and instruction.md)")
    return [_row(folder.resolve(), oracle) for folder in dirs]


def _row(folder: Path, oracle: bool) -> Task:
    config = read_config(folder / "task.toml", folder)
    if not (folder / "tests" / "test.sh").is_file():
        raise ValueError(f"{folder}: no tests/test.sh")
    args: dict[str, Any] = {
        "instruction": read_text(folder / "instruction.md", folder),
        "tests": _files(folder / "tests", folder),
        "verifier_timeout": config.verifier_timeout,
    }
    if config.verifier_env:
        args["verifier_env"] = config.verifier_env
    if config.solution_env:
        args["solution_env"] = config.solution_env
    if (folder / "solution" / "solve.sh").is_file():
        args["solution"] = _files(folder / "solution", folder)
    elif oracle:
        raise ValueError(f"{folder}: no solution/solve.sh to run as the oracle")
    if oracle:
        args["oracle"] = True
    return Task(
        env=HARBOR_ENV,
        id=HARBOR_ENV,
        args=args,
        slug=folder.name,
        columns=config.metadata,
        runtime_config=_runtime_config(folder, config),
    )


def _runtime_config(folder: Path, config: HarborConfig) -> dict[str, Any]:
    """Where the image comes from, the container's limits and the phase deadlines."""
    harbor: dict[str, Any] = {
        "environment": str(folder / "environment"),
        "build_timeout_sec": config.build_timeout,
        "allow_internet": config.allow_internet,
    }
    if config.docker_image:
        harbor["docker_image"] = config.docker_image
    compose = next(
        (
            folder / "environment" / n
            for n in COMPOSE_FILES
            if (folder / "environment" / n).is_file()
        ),
        None,
    )
    if compose is not None:
        harbor["compose"] = str(compose)
    resources: dict[str, Any] = {}
    if config.cpus is not None:
        resources["cpus"] = config.cpus
    if config.memory is not None:
        resources["memory"] = config.memory
    out: dict[str, Any] = {
        "harbor": harbor,
        "timeouts": {"agent": config.agent_timeout, "grade": config.verifier_timeout},
    }
    if resources:
        out["resources"] = resources
    return out


def _files(folder: Path, root: Path) -> dict[str, Any]:
    """Every file below `folder` by relative path: its text, or `{"base64"|"text",
    "mode"}`; only regular files inside the task folder `root` (`folder_files`)."""
    out: dict[str, Any] = {}
    for path in folder_files(folder, root):
        data, mode = read_file(path, root)
        out[path.relative_to(folder).as_posix()] = _encode(data, bool(mode & 0o111))
    return out


def _encode(data: bytes, executable: bool) -> str | dict[str, Any]:
    try:
        text = data.decode()
    except UnicodeDecodeError:
        return {"base64": base64.b64encode(data).decode(), "mode": 0o755 if executable else 0o644}
    return {"text": text, "mode": 0o755} if executable else text
