"""The `Task` row: a template id plus bound args, portable anywhere."""

from __future__ import annotations

import hashlib
from typing import Any

import orjson
from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

from .._public import publish

__all__ = ["Task", "args_digest"]


def args_digest(args: dict[str, Any]) -> str:
    """A short hash of the canonical JSON of `args` (sorted keys), stable across runs."""
    canonical = orjson.dumps(args, option=orjson.OPT_SORT_KEYS | orjson.OPT_NON_STR_KEYS)
    return hashlib.sha256(canonical).hexdigest()[:8]


class Task(BaseModel):
    """One runnable row: which environment, which template, with which args.

    `model_dump()` and `Task.model_validate()` are the whole codec.
    """

    model_config = ConfigDict(extra="forbid")

    env: str
    """Name of the environment the row belongs to."""
    id: str
    """Template id registered on the environment."""
    args: dict[str, Any] = Field(default_factory=dict)
    """Arguments bound into the template."""
    slug: str = ""
    """Stable key for lookup and filtering; defaults to id plus a hash of the args."""
    columns: dict[str, Any] | None = None
    """Metadata facets (difficulty, split, ...)."""
    agent_config: dict[str, Any] | None = None
    """Per-row agent overrides, e.g. `{"max_steps": 50}`."""
    runtime_config: dict[str, Any] | None = None
    """Per-row launch hints (image, resources); runtimes apply what they support."""
    validation: list[dict[str, Any]] | None = None
    """Platform/sync metadata (HUD's field; kept and written back unchanged)."""
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
