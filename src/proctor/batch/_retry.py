"""Which ended rollouts `--resume` runs again: `--retry ID...` and `--retry-where FILTER`.

A filter is `key=value` terms over the index's filterable columns (`FILTERABLE`),
joined by `,` or `and`: every term must hold; one key given twice accepts either value
(`status=failed,status=interrupted`).
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from typing import Any

from ..store import FILTERABLE

__all__ = ["chosen_ids", "parse_where"]

_SPLIT = re.compile(r"\s*,\s*|\s+and\s+", re.IGNORECASE)


def parse_where(text: str) -> dict[str, list[Any]]:
    """`status=interrupted and task=add-1-2` as `{"status": ["interrupted"], ...}`.

    Raises:
        ValueError: an empty filter, a term that is not `key=value`, an unknown key,
            or an `attempt` that is not a whole number.
    """
    terms = [t for t in _SPLIT.split(text.strip()) if t]
    if not terms:
        raise ValueError("--retry-where: an empty filter; e.g. 'status=interrupted'")
    filters: dict[str, list[Any]] = {}
    for term in terms:
        key, eq, value = (part.strip() for part in term.partition("="))
        if not eq or not key or not value:
            raise ValueError(f"--retry-where: {term!r} is not key=value (e.g. status=interrupted)")
        if key not in FILTERABLE:
            raise ValueError(f"--retry-where: unknown key {key!r}; one of {', '.join(FILTERABLE)}")
        if key == "attempt":
            if not value.isdigit():
                raise ValueError(f"--retry-where: attempt={value!r} is not a whole number")
            filters.setdefault(key, []).append(int(value))
        else:
            filters.setdefault(key, []).append(value)
    return filters


def chosen_ids(out: str, ids: Sequence[str], where: str | None) -> set[str]:
    """The rollout ids named by `ids` and matched by `where`, in `out`'s index.

    Raises:
        StoreError: an id that is not a rollout of the batch.
        ValueError: a bad filter.
    """
    from .._errors import StoreError
    from ..store import list_rollouts

    chosen: set[str] = set()
    if ids:
        known = {row["id"] for row in list_rollouts(out, limit=None)}
        unknown = [i for i in ids if i not in known]
        if unknown:
            raise StoreError(f"--retry: no rollout {', '.join(map(repr, unknown))} in {out}")
        chosen.update(ids)
    if where is not None:
        filters: dict[str, Any] = dict(parse_where(where))
        chosen.update(row["id"] for row in list_rollouts(out, **filters, limit=None))
    return chosen
