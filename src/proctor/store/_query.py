"""`RolloutQuery`: which rollouts of an index to read, in what order, which page."""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any

from ._index import COLUMNS, ENDED, FILTERABLE, SORTABLE

__all__ = ["Filter", "RolloutQuery", "select", "where"]

Filter = str | int | Iterable[str | int] | None
"""A value, or any of several values; None: no filter."""


@dataclass(frozen=True, slots=True)
class RolloutQuery:
    """Filters, sort and page over a batch's index (`list_rollouts`, `page_rollouts`).

    Each column filter (`status`, `task`, `agent`, `model`, `phase`, `error_phase`,
    `attempt`) is a value or a list of values. `ended` keeps the rollouts that ended
    (`TERMINAL` statuses), or with False those that did not (queued, or in flight when
    a runner died: what a resume looks at). `id_contains` keeps ids containing the text;
    `reward_min` and `reward_max` bound the reward (inclusive). `order_by` is any index
    column; ties sort by `seq` (plan order). `limit=None` reads every row.

    Raises:
        ValueError: an unknown `order_by` column, or a negative `offset`.
    """

    status: Filter = None
    task: Filter = None
    agent: Filter = None
    model: Filter = None
    phase: Filter = None
    error_phase: Filter = None
    attempt: Filter = None
    ended: bool | None = None
    id_contains: str = ""
    reward_min: float | None = None
    reward_max: float | None = None
    order_by: str = "seq"
    descending: bool = False
    limit: int | None = 100
    offset: int = 0

    def __post_init__(self) -> None:
        if self.order_by not in SORTABLE:
            raise ValueError(f"cannot sort by {self.order_by!r}; one of {sorted(SORTABLE)}")
        if self.offset < 0:
            raise ValueError(f"offset is at least 0, not {self.offset}")


def where(query: RolloutQuery) -> tuple[str, list[Any]]:
    """The query's filters as a ` WHERE ...` clause (or "") and its arguments."""
    clauses: list[str] = []
    args: list[Any] = []
    for col in FILTERABLE:
        value = getattr(query, col)
        if value is None:
            continue
        values = (
            list(value) if isinstance(value, Iterable) and not isinstance(value, str) else [value]
        )
        clauses.append(f"{col} IN ({', '.join('?' * len(values))})")
        args += values
    if query.ended is not None:
        test = "status IN ({})" if query.ended else "(status IS NULL OR status NOT IN ({}))"
        clauses.append(test.format(", ".join("?" * len(ENDED))))
        args += sorted(ENDED)
    if query.id_contains:
        clauses.append("instr(id, ?) > 0")
        args.append(query.id_contains)
    if query.reward_min is not None:
        clauses.append("reward >= ?")
        args.append(query.reward_min)
    if query.reward_max is not None:
        clauses.append("reward <= ?")
        args.append(query.reward_max)
    return (" WHERE " + " AND ".join(clauses) if clauses else ""), args


def select(query: RolloutQuery, columns: Sequence[str] = COLUMNS) -> tuple[str, list[Any]]:
    """The SQL selecting `columns` of the query's rows, sorted, one page; its arguments.

    Raises:
        ValueError: an unknown column.
    """
    unknown = [c for c in columns if c not in SORTABLE]
    if unknown or not columns:
        raise ValueError(f"no column {unknown!r}; choose from {sorted(SORTABLE)}")
    clause, args = where(query)
    order = f"{query.order_by} {'DESC' if query.descending else 'ASC'}, seq ASC"
    sql = f"SELECT {', '.join(columns)} FROM rollouts{clause} ORDER BY {order} LIMIT ? OFFSET ?"
    return sql, [*args, -1 if query.limit is None else query.limit, query.offset]
