"""Harbor / Terminal-Bench task directories as proctor rows.

A task directory holds `task.toml`, `instruction.md`, `environment/Dockerfile`,
`tests/test.sh` and (optionally) `solution/solve.sh`. Each becomes one row of the
`harbor` environment (`_harbor_env.py`): the instruction is the prompt, the test and
solution files travel in the row's args (the container gets them only when grading,
or when running the reference solution), and `runtime_config` names the environment
folder `HarborRuntime` builds the image from, with the task's resources and deadlines.
"""

from __future__ import annotations

import base64
import os
import tomllib
from pathlib import Path
from typing import Any

from ..records._task import Task

__all__ = ["HARBOR_ENV", "harbor_tasks", "is_harbor_task", "task_dirs"]

HARBOR_ENV = "harbor"
"""The environment (and template id) every Harbor row names."""
_VERIFIER_TIMEOUT = 600.0  # Harbor's default [verifier] timeout_sec
_AGENT_TIMEOUT = 600.0  # Harbor's default [agent] timeout_sec
_BUILD_TIMEOUT = 600.0  # Harbor's default [environment] build_timeout_sec
_MAX_FILE = 16 * 1024 * 1024  # bytes of one test or solution file carried in a row


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
        ValueError: no task directory there, a `task.toml` does not parse, a task
            has no `tests/test.sh`, or `oracle` and a task has no `solution/solve.sh`.
    """
    dirs = task_dirs(Path(path))
    if not dirs:
        raise ValueError(f"{path}: no Harbor task directory (task.toml and instruction.md)")
    return [_row(folder.resolve(), oracle) for folder in dirs]


def _row(folder: Path, oracle: bool) -> Task:
    try:
        config = tomllib.loads((folder / "task.toml").read_text())
    except tomllib.TOMLDecodeError as exc:
        raise ValueError(f"{folder / 'task.toml'}: {exc}") from None
    if not (folder / "tests" / "test.sh").is_file():
        raise ValueError(f"{folder}: no tests/test.sh")
    verifier = config.get("verifier") or {}
    args: dict[str, Any] = {
        "instruction": (folder / "instruction.md").read_text(),
        "tests": _files(folder / "tests"),
        "verifier_timeout": float(verifier.get("timeout_sec", _VERIFIER_TIMEOUT)),
    }
    for key, section in (("verifier_env", verifier), ("solution_env", config.get("solution"))):
        if variables := _literal_env(section, folder):
            args[key] = variables
    if (folder / "solution" / "solve.sh").is_file():
        args["solution"] = _files(folder / "solution")
    elif oracle:
        raise ValueError(f"{folder}: no solution/solve.sh to run as the oracle")
    if oracle:
        args["oracle"] = True
    return Task(
        env=HARBOR_ENV,
        id=HARBOR_ENV,
        args=args,
        slug=folder.name,
        columns=dict(config.get("metadata") or {}) or None,
        runtime_config=_runtime_config(folder, config),
    )


def _runtime_config(folder: Path, config: dict[str, Any]) -> dict[str, Any]:
    """Where the image comes from, the container's limits and the phase deadlines."""
    environment = config.get("environment") or {}
    agent = config.get("agent") or {}
    verifier = config.get("verifier") or {}
    harbor: dict[str, Any] = {
        "environment": str(folder / "environment"),
        "build_timeout_sec": float(environment.get("build_timeout_sec", _BUILD_TIMEOUT)),
        "allow_internet": bool(environment.get("allow_internet", True)),
    }
    if environment.get("docker_image"):
        harbor["docker_image"] = str(environment["docker_image"])
    resources: dict[str, Any] = {}
    if environment.get("cpus"):
        resources["cpus"] = environment["cpus"]
    if environment.get("memory_mb"):
        resources["memory"] = f"{int(environment['memory_mb'])}m"
    elif environment.get("memory"):  # "2G", "512M"
        resources["memory"] = str(environment["memory"]).lower()
    out: dict[str, Any] = {
        "harbor": harbor,
        "timeouts": {
            "agent": float(agent.get("timeout_sec", _AGENT_TIMEOUT)),
            "grade": float(verifier.get("timeout_sec", _VERIFIER_TIMEOUT)),
        },
    }
    if resources:
        out["resources"] = resources
    return out


def _literal_env(section: Any, folder: Path) -> dict[str, str]:
    """A `[verifier]` or `[solution]` section's `env`, without values naming this
    machine's variables (`${VAR}`: a secret must not travel in a row)."""
    env = (section or {}).get("env") if isinstance(section, dict) else None
    if not isinstance(env, dict):
        return {}
    return {str(k): str(v) for k, v in env.items() if "${" not in str(v)}


def _files(root: Path) -> dict[str, Any]:
    """Every file under `root` by relative path: its text, or `{"base64"|"text", "mode"}`."""
    out: dict[str, Any] = {}
    for path in sorted(p for p in root.rglob("*") if p.is_file()):
        if path.stat().st_size > _MAX_FILE:
            raise ValueError(f"{path}: larger than {_MAX_FILE} bytes")
        out[path.relative_to(root).as_posix()] = _encode(path)
    return out


def _encode(path: Path) -> str | dict[str, Any]:
    data = path.read_bytes()
    executable = os.access(path, os.X_OK)
    try:
        text = data.decode()
    except UnicodeDecodeError:
        return {"base64": base64.b64encode(data).decode(), "mode": 0o755 if executable else 0o644}
    return {"text": text, "mode": 0o755} if executable else text
