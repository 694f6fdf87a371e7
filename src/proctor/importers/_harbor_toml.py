"""A Harbor task's `task.toml`, read and checked: the values proctor uses, in range.

Each value out of range or of the wrong type is refused with an error naming the file
and the key (`agent.timeout_sec = -5` would end the agent at once, `1e308` never,
`memory_mb = 99999999` asks for a limit no machine has).
"""

from __future__ import annotations

import math
import re
import tomllib
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypeVar

from ._folder_files import read_text

__all__ = ["HarborConfig", "read_config"]

_DEFAULT_TIMEOUT = 600.0  # Harbor's default agent, verifier and build timeout_sec
MAX_SECONDS = 86_400.0
"""The longest phase (agent, verifier, build) a task may ask for: a day."""
MAX_MEMORY_MB = 1024 * 1024  # 1 TiB
MAX_CPUS = 1024
_MEMORY = re.compile(r"^([0-9]+)([kmg]?)b?$", re.IGNORECASE)  # Harbor's older "2G", "512M"
_UNIT_MB = {"": 1 / (1024 * 1024), "k": 1 / 1024, "m": 1, "g": 1024}
T = TypeVar("T")


@dataclass(frozen=True)
class HarborConfig:
    """The checked values of one `task.toml`."""

    agent_timeout: float = _DEFAULT_TIMEOUT
    verifier_timeout: float = _DEFAULT_TIMEOUT
    build_timeout: float = _DEFAULT_TIMEOUT
    allow_internet: bool = True
    docker_image: str | None = None
    cpus: float | None = None
    memory: str | None = None  # the container's limit, like "2048m"
    verifier_env: dict[str, str] | None = None
    solution_env: dict[str, str] | None = None
    metadata: dict[str, Any] | None = None


def read_config(path: Path, root: Path) -> HarborConfig:
    """The checked `task.toml` at `path`, a regular file inside the task folder `root`.

    Raises:
        ValueError: the file is unreadable (see `read_text`), does not parse, or a
            value is out of range or of the wrong type (the message names file and key).
    """
    try:
        data = tomllib.loads(read_text(path, root))
    except tomllib.TOMLDecodeError as exc:
        raise ValueError(f"{path}: {exc}") from None
    check = _Checker(path, data)
    memory = check.number("environment.memory_mb", 1, MAX_MEMORY_MB, integer=True)
    return HarborConfig(
        agent_timeout=check.seconds("agent.timeout_sec"),
        verifier_timeout=check.seconds("verifier.timeout_sec"),
        build_timeout=check.seconds("environment.build_timeout_sec"),
        allow_internet=check.boolean("environment.allow_internet", True),
        docker_image=check.string("environment.docker_image"),
        cpus=check.number("environment.cpus", 0, MAX_CPUS, above=True),
        memory=f"{int(memory)}m" if memory is not None else check.memory("environment.memory"),
        verifier_env=check.literal_env("verifier.env"),
        solution_env=check.literal_env("solution.env"),
        metadata=check.table("metadata"),
    )


class _Checker:
    """Values of one parsed `task.toml` by dotted key, each checked."""

    def __init__(self, path: Path, data: dict[str, Any]) -> None:
        self.path = path
        self.data = data

    def get(self, key: str) -> Any:
        section, _, name = key.rpartition(".")
        table = self.data.get(section) if section else self.data
        if table is None:
            return None
        if not isinstance(table, dict):
            raise self.error(section, table, "must be a table")
        return table.get(name)

    def error(self, key: str, value: Any, why: str) -> ValueError:
        return ValueError(f"{self.path}: {key} = {value!r}: {why}")

    def seconds(self, key: str) -> float:
        value = self.number(key, 0, MAX_SECONDS, above=True)
        return _DEFAULT_TIMEOUT if value is None else float(value)

    def number(
        self, key: str, low: float, high: float, *, above: bool = False, integer: bool = False
    ) -> int | float | None:
        """A number in [low, high] (above `low` when `above`), or None when unset."""
        value = self.get(key)
        if value is None or (value == 0 and key.endswith(("cpus", "memory_mb"))):
            return None  # 0: no limit, as Harbor reads it
        kind = "an integer" if integer else "a number"
        if isinstance(value, bool) or not isinstance(value, int if integer else int | float):
            raise self.error(key, value, f"must be {kind}")
        if not math.isfinite(value) or value > high or value < low or (above and value == low):
            bound = f"above {low:g}" if above else f"at least {low:g}"
            raise self.error(key, value, f"must be {kind} {bound} and at most {high:g}")
        return value

    def typed(self, key: str, kind: type[T], what: str) -> T | None:
        """The value at `key` when it is a `kind` (`what` names one), None when unset."""
        value = self.get(key)
        if value is not None and not isinstance(value, kind):
            raise self.error(key, value, f"must be {what}")
        return value

    def boolean(self, key: str, default: bool) -> bool:
        value = self.typed(key, bool, "true or false")
        return default if value is None else value

    def string(self, key: str) -> str | None:
        return self.typed(key, str, "a string") or None

    def memory(self, key: str) -> str | None:
        """A size like "2G" or "512M" as the container's limit ("2g", "512m")."""
        value = self.string(key)
        if value is None:
            return None
        match = _MEMORY.match(value.strip())
        if not match or not 0 < int(match[1]) * _UNIT_MB[match[2].lower()] <= MAX_MEMORY_MB:
            raise self.error(key, value, f"must be a size like '2G', at most {MAX_MEMORY_MB}M")
        return f"{match[1]}{match[2].lower()}"

    def table(self, key: str) -> dict[str, Any] | None:
        value = self.typed(key, dict, "a table")
        return dict(value) if value else None

    def literal_env(self, key: str) -> dict[str, str] | None:
        """An `env` table, without values naming this machine's variables (`${VAR}`:
        a secret must not travel in a row)."""
        env = self.table(key) or {}
        for name, value in env.items():
            if not isinstance(value, str | int | float | bool):
                raise self.error(f"{key}.{name}", value, "must be a string")
        return {str(k): str(v) for k, v in env.items() if "${" not in str(v)} or None
