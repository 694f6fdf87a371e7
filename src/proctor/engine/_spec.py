"""What a pool runs: the rollouts, the agents that run them, and one concurrency bound;
`Repeats` makes each row's rollouts on demand."""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Generic, TypeVar, overload

from ._timeouts import Timeouts

if TYPE_CHECKING:
    from ..agents import Agent
    from ..records import Task
    from ..runtimes import RuntimeLike

__all__ = ["Planned", "Repeats", "RunSpec"]

R = TypeVar("R")
T = TypeVar("T")


@dataclass(frozen=True, slots=True)
class Planned:
    """One rollout to run: a row, its group (shared by the row's repeats) and the name
    of the agent, among `RunSpec.agents`, that acts on it."""

    task: Task
    group_id: str
    agent: str = ""
    trace_id: str | None = None


@dataclass(frozen=True, slots=True)
class RunSpec:
    """Many rollouts as one job: at most `max_concurrent` of them in flight at a time,
    across every agent and, on Ray, every shard (None: no bound).

    Raises:
        ValueError: `max_concurrent` below 1, or a rollout names an agent not in `agents`.
    """

    rollouts: Sequence[Planned]
    agents: Mapping[str, Agent]
    runtime: RuntimeLike
    job_id: str
    timeouts: Timeouts = field(default_factory=Timeouts)
    max_concurrent: int | None = None

    def __post_init__(self) -> None:
        if self.max_concurrent is not None and self.max_concurrent < 1:
            raise ValueError("max_concurrent must be >= 1")
        unknown = {p.agent for p in self.rollouts} - set(self.agents)
        if unknown:
            raise ValueError(f"rollouts name agents the spec does not have: {sorted(unknown)}")

    @property
    def width(self) -> int:
        """Rollouts that may be in flight at once: the bound, or every rollout."""
        return min(self.max_concurrent or len(self.rollouts), len(self.rollouts))


class Repeats(Sequence[T], Generic[R, T]):
    """`make(row, repeat)` for each of `rows` and each repeat from 1 to `group`, in that
    order, made when asked for: a long run's rollouts (`RunSpec.rollouts`) need not all
    live at once."""

    def __init__(self, rows: Sequence[R], group: int, make: Callable[[R, int], T]) -> None:
        self.rows = rows
        self.group = group
        self._make = make
        self._size = len(rows) * group

    def __len__(self) -> int:
        return self._size

    def __iter__(self) -> Iterator[T]:  # not Sequence's: one __getitem__ an item
        make, group = self._make, self.group
        for row in self.rows:
            for repeat in range(1, group + 1):
                yield make(row, repeat)

    @overload
    def __getitem__(self, i: int) -> T: ...
    @overload
    def __getitem__(self, i: slice) -> Sequence[T]: ...
    def __getitem__(self, i: int | slice) -> T | Sequence[T]:
        if isinstance(i, slice):
            return [self[j] for j in range(*i.indices(self._size))]
        if i < 0:
            i += self._size
        if not 0 <= i < self._size:
            raise IndexError(i)
        row, k = divmod(i, self.group)
        return self._make(self.rows[row], k + 1)
