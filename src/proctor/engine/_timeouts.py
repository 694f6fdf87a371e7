"""`Timeouts`: every deadline of a rollout in one value object."""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass, fields, replace
from typing import Any

__all__ = ["Timeouts"]

BOUNDED_START = 300.0
BOUNDED_AGENT = 1800.0
BOUNDED_GRADE = 300.0


@dataclass(frozen=True, slots=True)
class Timeouts:
    """Deadlines in seconds; `None` means no limit.

    `Timeouts(30)` caps the rollout at 30 s. Each limit is applied as a scope at its
    own phase and a breach raises `RolloutTimeout(phase, limit)` naming the phase the
    run was in, except `agent`: its breach stops the agent and the run is graded on
    what it left (`stop_reason` "timeout"). A `TimeoutError` raised by the agent or the
    environment is not a breach and keeps its own type.

    Args:
        rollout: provisioning through grading. Teardown is not cut short by it.
        connect: retrying connect + hello until the server answers (`ConnectTimeout`).
        start: `tasks.start` (the task's setup up to the prompt).
        agent: the agent loop (then graded all the same).
        grade: `tasks.grade` (and a verifier task's start and grade).
        teardown: stopping the substrate; always bounded. After a failure, telling the
            environment to cancel the task gets at most half of it first.

    Raises:
        ValueError: a limit is negative or not a number.
    """

    rollout: float | None = None
    connect: float = 60.0
    start: float | None = None
    agent: float | None = None
    grade: float | None = None
    teardown: float = 30.0

    def __post_init__(self) -> None:
        for f in fields(self):
            value = getattr(self, f.name)
            if value is None and f.name not in ("connect", "teardown"):
                continue
            if isinstance(value, bool) or not isinstance(value, int | float):
                raise ValueError(f"Timeouts.{f.name} must be a number of seconds, not {value!r}")
            if math.isnan(value) or value < 0:
                raise ValueError(f"Timeouts.{f.name} must be >= 0 seconds, not {value!r}")

    @property
    def shortest(self) -> float:
        """The smallest limit of all (connect and teardown always have one)."""
        least = min(self.connect, self.teardown)
        for limit in (self.rollout, self.start, self.agent, self.grade):
            if limit is not None and limit < least:
                least = limit
        return least

    @classmethod
    def bounded(cls) -> Timeouts:
        """Generous deadlines for every phase, `proctor run`'s defaults: `start` 5 min,
        `agent` 30 min, `grade` 5 min (connect and teardown as usual), so a hung template
        or agent fails its rollout in that phase instead of holding a slot forever.
        `Timeouts()` itself keeps no limit on those phases."""
        return cls(start=BOUNDED_START, agent=BOUNDED_AGENT, grade=BOUNDED_GRADE)

    def for_row(self, runtime_config: Mapping[str, Any] | None) -> Timeouts:
        """These deadlines, tightened by a row's own: `runtime_config["timeouts"]`
        (`start`, `agent`, `grade` in seconds, e.g. from a Harbor `task.toml`); each is
        the smaller of the two. Anything else there is ignored."""
        if not runtime_config:
            return self
        own = runtime_config.get("timeouts")
        if not isinstance(own, Mapping):
            return self
        tighter = {}
        for name in ("start", "agent", "grade"):
            value = own.get(name)
            if isinstance(value, int | float) and not isinstance(value, bool) and value > 0:
                current = getattr(self, name)
                tighter[name] = float(value) if current is None else min(current, float(value))
        return replace(self, **tighter) if tighter else self

    @classmethod
    def of(cls, value: Timeouts | float | None) -> Timeouts:
        """Coerce a number (rollout limit) or None into `Timeouts`."""
        if isinstance(value, Timeouts):
            return value
        return _DEFAULT if value is None else cls(rollout=float(value))


_DEFAULT = Timeouts()
