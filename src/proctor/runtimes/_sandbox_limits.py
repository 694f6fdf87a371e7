"""A sandbox's resource limits: the `limits` mapping of `SandboxRuntime`, checked."""

from __future__ import annotations

import math
import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

__all__ = ["DEFAULT_LIMITS", "LIMIT_KEYS"]

LIMIT_KEYS = ("memory", "processes", "file_size", "tmpfs", "cpu_time", "wall_time")
DEFAULT_LIMITS: Mapping[str, Any] = {
    "memory": "2G",
    "processes": 256,
    "file_size": "1G",
    "tmpfs": "512M",
}


@dataclass(frozen=True, slots=True)
class _Limits:
    """Bounds on one sandbox (None: no bound); sizes in bytes, times in seconds."""

    memory: int | None = None
    processes: int | None = None
    file_size: int | None = None
    tmpfs: int | None = None
    cpu_time: float | None = None
    wall_time: float | None = None

    @classmethod
    def parse(cls, spec: Mapping[str, Any], where: str) -> _Limits:
        """Validate a limits mapping (None values mean no limit)."""
        if not isinstance(spec, Mapping):
            raise ValueError(f"{where}: expected a mapping of {', '.join(LIMIT_KEYS)}")
        unknown = sorted(set(spec) - set(LIMIT_KEYS))
        if unknown:
            raise ValueError(
                f"{where}: unknown limit {unknown[0]!r} (known: {', '.join(LIMIT_KEYS)})"
            )
        memory, processes = spec.get("memory"), spec.get("processes")
        file_size, tmpfs = spec.get("file_size"), spec.get("tmpfs")
        return cls(
            memory=None if memory is None else _size(memory, f"{where}.memory"),
            processes=None if processes is None else _count(processes, f"{where}.processes"),
            file_size=None if file_size is None else _size(file_size, f"{where}.file_size"),
            tmpfs=None if tmpfs is None else _size(tmpfs, f"{where}.tmpfs"),
            cpu_time=_seconds(spec.get("cpu_time"), f"{where}.cpu_time"),
            wall_time=_seconds(spec.get("wall_time"), f"{where}.wall_time"),
        )

    def given(self) -> dict[str, Any]:
        return {k: getattr(self, k) for k in LIMIT_KEYS if getattr(self, k) is not None}

    def inside(self) -> dict[str, Any]:
        """What the sandbox applies itself (wall time is the host's; tmpfs a cold bwrap's)."""
        return {k: v for k, v in self.given().items() if k != "wall_time"}


_UNITS = {"": 1, "k": 1 << 10, "m": 1 << 20, "g": 1 << 30, "t": 1 << 40}


def _size(value: Any, where: str) -> int:
    if isinstance(value, int) and not isinstance(value, bool) and value > 0:
        return value
    match = re.fullmatch(r"\s*(\d+(?:\.\d+)?)\s*([kmgt]?)(?:i?b)?\s*", str(value), re.I)
    if isinstance(value, bool) or not isinstance(value, str) or match is None:
        raise ValueError(f"{where}: expected bytes (int) or a size like '512M', got {value!r}")
    size = int(float(match[1]) * _UNITS[match[2].lower()])
    if size <= 0:
        raise ValueError(f"{where}: must be positive, got {value!r}")
    return size


def _count(value: Any, where: str) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise ValueError(f"{where}: expected a positive integer, got {value!r}")
    return value


def _seconds(value: Any, where: str) -> float | None:
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int | float) or not value > 0:
        raise ValueError(f"{where}: expected positive seconds, got {value!r}")
    if not math.isfinite(value):
        raise ValueError(f"{where}: expected finite seconds, got {value!r}")
    return float(value)
