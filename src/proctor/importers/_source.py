"""`Source`: what an importer found, as rows, an environment and a runtime."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from ..env import Environment
    from ..records import Task
    from ..runtimes import RuntimeLike

__all__ = ["Source"]


@dataclass
class Source:
    """Rows from a foreign format, with where they run.

    Attributes:
        kind: the format ("harbor", "openenv").
        rows: the task rows.
        environment: the environment serving them: an `Environment` object (served
            in process), or the path of an environment source (served where the
            runtime puts it).
        runtime: the runtime the rows need (a fresh one; enter it with `async with`
            when it is a context manager, so it cleans up), or None for any.
    """

    kind: str
    rows: list[Task]
    environment: Environment | str
    runtime: RuntimeLike | None = field(default=None, repr=False)
