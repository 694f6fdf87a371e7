"""The `Task` row: a template id plus bound args, portable anywhere.

Rows are HUD's task rows (hud 0.6.21's `Task`): the same fields in the same order, the
same default slug, so a task file written by either loads in the other with the same
slugs and is written back unchanged. Keys neither knows are kept and written back.
"""

from __future__ import annotations

import hashlib
import json
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

from .._public import publish

__all__ = ["Task", "args_digest"]


def args_digest(args: dict[str, Any]) -> str:
    """HUD's slug suffix: 8 hex of the SHA-1 of `json.dumps(args, sort_keys=True, default=str)`.

    Stable across runs and key order; a value JSON cannot hold counts as its `str()`.
    """
    canonical = json.dumps(args, sort_keys=True, default=str).encode()
    return hashlib.sha1(canonical, usedforsecurity=False).hexdigest()[:8]


class Task(BaseModel):
    """One runnable row: which environment, which template, with which args.

    `model_dump()` and `Task.model_validate()` are the whole codec. Unknown keys (a
    foreign platform's metadata) are kept as extra fields and written back after the
    known ones.
    """

    model_config = ConfigDict(extra="allow")

    env: str
    """Name of the environment the row belongs to."""
    id: str
    """Template id registered on the environment."""
    args: dict[str, Any] = Field(default_factory=dict)
    """Arguments bound into the template."""
    slug: str = ""
    """Stable key for lookup and filtering; defaults to `id-<args_digest(args)>`, or
    `id` alone without args (HUD's rule)."""
    validation: list[dict[str, Any]] | None = None
    """Platform/sync metadata (HUD's field; kept and written back unchanged)."""
    agent_config: dict[str, Any] | None = None
    """Per-row agent overrides, e.g. `{"max_steps": 50}`."""
    columns: dict[str, Any] | None = None
    """Metadata facets (difficulty, split, ...)."""
    runtime_config: dict[str, Any] | None = None
    """Per-row launch hints (image, resources, limits; HUD's `RuntimeConfig` shape is
    kept as written, relative paths included); runtimes apply what they support."""
    verifier: Task | None = None
    """An agent-less task whose grade of the actor's result is the grade of record
    (HUD's verifier): started after the actor is graded and sent the actor's grade as
    its answer, on the actor's substrate when it names the same environment and no
    `runtime_config`, else on a fresh one."""
    solution: Any = None
    """This row's reference answer, for `proctor validate --oracle` (else the
    template's `solution=`)."""

    @field_validator("verifier")
    @classmethod
    def _no_nested_verifier(cls, verifier: Task | None) -> Task | None:
        if verifier is not None and verifier.verifier is not None:
            raise ValueError("nested verifier tasks are not supported")
        return verifier

    @model_validator(mode="after")
    def _default_slug(self) -> Task:
        if not self.slug:
            self.slug = f"{self.id}-{args_digest(self.args)}" if self.args else self.id
        return self


publish(globals(), __all__, "proctor.records")  # loaded lazily by the package
