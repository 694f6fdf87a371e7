"""`diff` and `sync`: which rows to create, update, delete or leave between two tasksets.

Rows are matched by slug and compared whole (every field, unknown keys included), as
HUD's `SyncPlan` does between a local and a platform taskset; here both sides are task
sources on disk, and `sync(..., apply=True)` rewrites the target file atomically.
"""

from __future__ import annotations

import json
import os
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

from .._errors import TasksetError
from .._loader import task_modules
from ..records import Task
from ._taskset import Taskset, dump_rows, write_atomic

__all__ = ["SyncPlan", "diff", "sync"]

Action = Literal["create", "update", "delete"]
_DATA = (".json", ".jsonl")


@dataclass(frozen=True)
class SyncPlan:
    """What makes a target taskset hold the source's rows, by slug.

    Attributes:
        to_create: Source rows whose slug the target lacks, in source order.
        to_update: Source rows whose slug the target has with other content.
        to_delete: Target rows whose slug the source lacks, in target order.
        unchanged: Source rows the target holds exactly.
        fields: For each slug to update, the top-level keys whose values differ.
    """

    to_create: tuple[Task, ...] = ()
    to_update: tuple[Task, ...] = ()
    to_delete: tuple[Task, ...] = ()
    unchanged: tuple[Task, ...] = ()
    fields: Mapping[str, tuple[str, ...]] = field(default_factory=dict)

    @property
    def changed(self) -> bool:
        """True when applying the plan would change the target."""
        return bool(self.to_create or self.to_update or self.to_delete)

    def actions(self) -> list[tuple[Action, Task]]:
        """Every change, creates first, then updates, then deletes."""
        return [
            *(("create", t) for t in self.to_create),
            *(("update", t) for t in self.to_update),
            *(("delete", t) for t in self.to_delete),
        ]

    def to_dict(self) -> dict[str, Any]:
        """The plan as JSON values: the slugs of each kind, the counts, and the
        fields each update changes."""
        kinds = {
            "create": self.to_create,
            "update": self.to_update,
            "delete": self.to_delete,
            "unchanged": self.unchanged,
        }
        return {
            "changed": self.changed,
            "counts": {kind: len(rows) for kind, rows in kinds.items()},
            **{kind: [t.slug for t in rows] for kind, rows in kinds.items()},
            "fields": {slug: list(keys) for slug, keys in self.fields.items()},
        }

    def apply_to(self, target: Iterable[Task]) -> list[Task]:
        """The target's rows after the plan: its order kept, updates in place,
        deletions gone, new rows appended in source order."""
        updates = {t.slug: t for t in self.to_update}
        gone = {t.slug for t in self.to_delete}
        kept = [updates.get(t.slug, t) for t in target if t.slug not in gone]
        return [*kept, *self.to_create]


def diff(source: Taskset, target: Taskset) -> SyncPlan:
    """The plan that makes `target` hold `source`'s rows.

    Two rows with one slug are the same when every field is (unknown keys included;
    key order inside a field does not count, `1` and `1.0` differ, as in the file).
    """
    theirs = {t.slug: t for t in target}
    create: list[Task] = []
    update: dict[str, Task] = {}
    fields: dict[str, tuple[str, ...]] = {}
    same: list[Task] = []
    for task in source:
        existing = theirs.get(task.slug)
        if existing is None:
            create.append(task)
        elif keys := _differing(existing, task):
            update[task.slug], fields[task.slug] = task, keys
        else:
            same.append(task)
    return SyncPlan(
        to_create=tuple(create),
        to_update=tuple(update.values()),
        to_delete=tuple(t for t in target if t.slug not in source),
        unchanged=tuple(same),
        fields=fields,
    )


def sync(
    source: Taskset | str | os.PathLike[str],
    target: str | os.PathLike[str],
    *,
    apply: bool = False,
) -> SyncPlan:
    """Plan (and with `apply`, make) the target task file hold the source's rows.

    Args:
        source: A `Taskset`, or anything `Taskset.from_file` reads.
        target: A `.json` or `.jsonl` file (missing: every row is created), or a folder
            whose task file is its one `tasks.json` or `tasks.jsonl` (`tasks.jsonl` is
            created in a folder holding neither).
        apply: Write the target when the plan changes it: in one atomic rename, in
            `Taskset.to_file`'s format, the target's row order kept (see
            `SyncPlan.apply_to`). Nothing is written when nothing changes.

    Returns:
        The plan, computed before any write.

    Raises:
        TasksetError: a side cannot be read, or the target is not a data task file
            (a `.py` source, or a folder of Python task files, cannot be written).
    """
    rows = source if isinstance(source, Taskset) else Taskset.from_file(source)
    path = target_file(target)
    current = Taskset.from_file(path) if path.exists() else Taskset(path.stem)
    plan = diff(rows, current)
    if apply and plan.changed:
        path.parent.mkdir(parents=True, exist_ok=True)
        write_atomic(path, dump_rows(plan.apply_to(current), path.suffix).encode())
    return plan


def target_file(target: str | os.PathLike[str]) -> Path:
    """The data file `sync` writes for `target` (it need not exist yet).

    Raises:
        TasksetError: `target` is neither a `.json`/`.jsonl` file nor a folder of one.
    """
    path = Path(target)
    if path.is_dir():
        python = [*[p for p in [path / "__init__.py"] if p.is_file()], *task_modules(path)]
        if python:
            raise TasksetError(
                f"{path}: its tasks come from Python ({', '.join(p.name for p in python)}); "
                "sync writes only a tasks.json or tasks.jsonl"
            )
        data = [path / f"tasks{suffix}" for suffix in _DATA if (path / f"tasks{suffix}").is_file()]
        if len(data) > 1:
            raise TasksetError(f"{path}: holds both tasks.json and tasks.jsonl; name one")
        return data[0] if data else path / "tasks.jsonl"
    if path.suffix not in _DATA:
        raise TasksetError(f"{path}: sync writes only .json or .jsonl task files")
    return path


def _differing(old: Task, new: Task) -> tuple[str, ...]:
    """The top-level keys whose values differ as written (key order aside), in row order."""
    a, b = _row(old), _row(new)
    keys = [*a, *(k for k in b if k not in a)]
    return tuple(k for k in keys if _canonical(a.get(k)) != _canonical(b.get(k)))


def _row(task: Task) -> dict[str, Any]:
    return task.model_dump(mode="json", exclude_none=True)


def _canonical(value: Any) -> str:
    return json.dumps(value, sort_keys=True, default=str, separators=(",", ":"))
