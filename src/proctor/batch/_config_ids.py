"""A batch's rollouts by name: `Assignment` and the `rollout_id` that names its folder."""

from __future__ import annotations

import hashlib
import re
from dataclasses import dataclass

__all__ = ["Assignment", "rollout_id"]

_UNSAFE = re.compile(r"[^A-Za-z0-9._-]+")
_MAX_ID = 120  # a rollout id names a folder: keep it far below NAME_MAX (255 bytes)


@dataclass(frozen=True, slots=True)
class Assignment:
    """One rollout of the batch: a task, an agent entry and a repeat.

    A slotted dataclass, not a pydantic model: a 100,000-rollout plan holds 100,000
    of them (about 100 bytes each instead of 1 KB).
    """

    rollout_id: str
    task: str
    """The task's slug."""
    agent: str
    """The agent entry's name."""
    model: str | None
    repeat: int
    """1-based."""
    enabled: bool


def rollout_id(slug: str, agent: str, repeat: int) -> str:
    """`<slug>--<agent>--r<k>`, with anything but `A-Za-z0-9._-` turned into `-`.

    Stable: it depends on these three values only. A result longer than 120
    characters is cut and suffixed with a hash of the full id, so it stays unique.
    """
    rid = f"{_clean(slug)}--{_clean(agent)}--r{repeat}"
    if len(rid) > _MAX_ID:
        digest = hashlib.sha256(rid.encode()).hexdigest()[:10]
        rid = f"{rid[: _MAX_ID - 11]}-{digest}"
    return rid


def _clean(part: str) -> str:
    return _UNSAFE.sub("-", part).strip("-.") or "x"
