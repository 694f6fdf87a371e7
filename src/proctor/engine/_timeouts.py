"""`Timeouts`: every deadline of a rollout in one value object."""

from __future__ import annotations

from dataclasses import dataclass

__all__ = ["Timeouts"]


@dataclass(frozen=True, slots=True)
class Timeouts:
    """Deadlines in seconds; `None` means no limit.

    `Timeouts(30)` caps the whole rollout at 30 s. Each limit is applied as a scope at
    its own phase and a breach raises `RolloutTimeout(phase, limit)`.

    Args:
        rollout: the whole rollout, provisioning to teardown.
        connect: retrying connect + hello until the server answers.
        start: `tasks.start` (the task's setup up to the prompt).
        agent: the agent loop.
        grade: `tasks.grade`.
        teardown: closing the client and stopping the substrate; always bounded.
    """

    rollout: float | None = None
    connect: float = 60.0
    start: float | None = None
    agent: float | None = None
    grade: float | None = None
    teardown: float = 30.0

    @classmethod
    def of(cls, value: Timeouts | float | None) -> Timeouts:
        """Coerce a number (rollout limit) or None into `Timeouts`."""
        if isinstance(value, Timeouts):
            return value
        return _DEFAULT if value is None else cls(rollout=float(value))


_DEFAULT = Timeouts()
