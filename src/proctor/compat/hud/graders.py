"""HUD's graders: `EvaluationResult`, `SubScore`, `Grader`, `BashGrader`, `combine`.

`EvaluationResult` is a proctor `Grade` built with HUD's fields (`reward`, `done`,
`content`, `info`, `isError`, `subscores`; extra keyword fields go to `info`), so a
template yields it as it is. `SubScore` keeps HUD's `name`, `value` (0 to 1),
`weight`, `info` and `children`. `BashGrader` runs `bash -lc COMMAND` and scores its
exit code; `combine` resolves subscores and grader calls at once and weighs them
(positive weights normalized to 1, negative ones kept as penalties), as HUD does.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
from collections.abc import Awaitable
from dataclasses import dataclass, replace
from typing import Any, ClassVar

from ...records import Grade
from .._scope import unsupported

__all__ = ["BashGrader", "EvaluationResult", "Grader", "SubScore", "combine"]


@dataclass(frozen=True, slots=True)
class SubScore:
    """One node of HUD's grade breakdown.

    Raises:
        ValueError: `value` is outside [0, 1].
    """

    name: str
    value: float
    weight: float = 1.0
    info: dict[str, Any] | None = None
    children: list[SubScore] | None = None

    def __post_init__(self) -> None:
        if not 0.0 <= self.value <= 1.0:
            raise ValueError(f"SubScore {self.name!r}: value {self.value!r} is not in [0, 1]")

    @property
    def score(self) -> float:
        """HUD's old alias of `value`."""
        return self.value

    def to_wire(self) -> dict[str, Any]:
        """The subscore as HUD's grade result carries it (None fields left out)."""
        out: dict[str, Any] = {"name": self.name, "weight": self.weight, "value": self.value}
        if self.children is not None:
            out["children"] = [c.to_wire() for c in self.children]
        if self.info is not None:
            out["info"] = self.info
        return out


class EvaluationResult(Grade):
    """HUD's evaluation result: a proctor `Grade` with HUD's field names."""

    __slots__ = ()

    def __init__(
        self,
        *,
        reward: float = 0.0,
        done: bool = True,
        content: str | None = None,
        info: dict[str, Any] | None = None,
        isError: bool = False,
        subscores: list[SubScore] | None = None,
        is_error: bool = False,
        **extra: Any,
    ) -> None:
        super().__init__(
            reward=float(reward),
            subscores=[s.to_wire() if isinstance(s, SubScore) else s for s in subscores or ()],
            info={**(info or {}), **extra},
            content=content,
            is_error=isError or is_error,
            done=done,
        )

    @property
    def isError(self) -> bool:
        """Whether the evaluation itself failed."""
        return self.is_error

    @classmethod
    def from_float(cls, value: float) -> EvaluationResult:
        """A result of just a reward."""
        return cls(reward=value)


class Grader:
    """HUD's grader base: `compute_score(**kwargs)` gives a score (or `(score, info)`,
    or a `SubScore`); `grade(weight, name=None, **kwargs)` packages it."""

    name: ClassVar[str] = "BaseGrader"

    @classmethod
    async def grade(cls, weight: float, name: str | None = None, **kwargs: Any) -> SubScore:
        """Run the grader; the subscore records its parameters in `info`."""
        result = await cls.compute_score(**kwargs)
        if isinstance(result, tuple):
            result = SubScore(cls.name, float(result[0]), info=result[1])
        elif not isinstance(result, SubScore):
            result = SubScore(cls.name, float(result))
        params = {
            k: v if isinstance(v, str | int | float | bool) else repr(v) for k, v in kwargs.items()
        }
        info = {**(result.info or {}), "_parameters": params}
        return replace(result, name=name or cls.name, weight=weight, info=info)

    @classmethod
    async def compute_score(cls, **kwargs: Any) -> Any:
        """The score in [0, 1] (subclasses implement it)."""
        raise NotImplementedError("Subclasses must implement compute_score")


class BashGrader(Grader):
    """Run `command` with `bash -lc` (in `cwd`) and score 1.0 when it exits 0."""

    name: ClassVar[str] = "BashGrader"
    default_timeout: ClassVar[float] = 600

    @classmethod
    async def compute_score(
        cls,
        command: str | None = None,
        cwd: str | None = None,
        timeout_seconds: float | None = None,
        **kwargs: Any,
    ) -> SubScore:
        """The exit code as a score; output and exit code in `info`.

        Raises:
            ValueError: no command.
        """
        if command is None:
            raise ValueError("BashGrader requires command")
        limit = cls.default_timeout if timeout_seconds is None else timeout_seconds
        proc = await asyncio.create_subprocess_exec(
            "/bin/bash", "-lc", command, cwd=cwd, stdout=asyncio.subprocess.PIPE,
            stderr=asyncio.subprocess.PIPE, stdin=asyncio.subprocess.DEVNULL,
            start_new_session=True,
        )  # fmt: skip
        try:
            async with asyncio.timeout(limit):
                out, err = await proc.communicate()
        except TimeoutError:
            late: dict[str, Any] = {"exit_code": None, "timed_out": True, "timeout": limit}
            return SubScore(cls.name, 0.0, info=late)
        finally:
            _kill_group(proc)
        info: dict[str, Any] = {"exit_code": proc.returncode}
        info.update(stdout=out.decode(errors="replace"), stderr=err.decode(errors="replace"))
        return SubScore(cls.name, 1.0 if proc.returncode == 0 else 0.0, info=info)


def _kill_group(proc: asyncio.subprocess.Process) -> None:
    """Kill what the command left running (its process group)."""
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(proc.pid, signal.SIGKILL)


async def combine(*items: SubScore | Awaitable[SubScore]) -> EvaluationResult:
    """Resolve subscores and grader calls concurrently and weigh them into a result.

    Raises:
        TypeError: an item is neither a `SubScore` nor awaitable.
        ValueError: no items, or no positive weight.
    """
    for item in items:
        if not isinstance(item, SubScore | Awaitable):
            raise TypeError(f"Expected SubScore or Awaitable[SubScore], got {type(item).__name__}")
    resolved = await asyncio.gather(*(_resolved(item) for item in items))
    if not resolved:
        raise ValueError("subscores must not be empty")
    positive = sum(s.weight for s in resolved if s.weight > 0)
    if positive <= 0:
        raise ValueError("subscores must include at least one positive weight")
    names = _unique([s.name for s in resolved])
    scaled = [
        replace(s, name=n, weight=s.weight / positive if s.weight > 0 else s.weight)
        for s, n in zip(resolved, names, strict=True)
    ]
    return EvaluationResult(reward=sum(s.value * s.weight for s in scaled), subscores=scaled)


async def _resolved(item: SubScore | Awaitable[SubScore]) -> SubScore:
    return item if isinstance(item, SubScore) else await item


def _unique(names: list[str]) -> list[str]:
    """HUD's renaming of repeated subscore names: `a`, `a-1`, `a-2`, ..."""
    out: list[str] = []
    for name in names:
        if names.count(name) == 1:
            out.append(name)
            continue
        n = 1
        while f"{name}-{n}" in out or f"{name}-{n}" in names:
            n += 1
        out.append(f"{name}-{n}")
    return out


__getattr__ = unsupported("hud.graders", __all__)
