"""A rollout's events, as its driver makes them, for the observers a caller registers
(a batch's recording, a Ray shard's phase reports, a live view's counts)."""

from __future__ import annotations

from typing import TYPE_CHECKING, Protocol

if TYPE_CHECKING:
    from ..agents import Run

__all__ = ["RolloutObserver"]


class RolloutObserver(Protocol):
    """Hears a rollout's phase changes from its driver (`execute_run(observers=...)`)."""

    def phase_changed(self, run: Run, phase: str) -> None:
        """`run` is about to enter `phase`; `run.phase` is still the one it leaves.

        An observer that raises keeps the run in the phase it was in, and fails it there.
        """
