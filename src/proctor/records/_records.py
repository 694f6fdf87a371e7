"""What a rollout leaves behind: `Grade`, `SubScore`, `Step`, `Trace`, `RunError`, job stats.

Plain slotted dataclasses (no validation on the hot path); `to_dict()` gives the JSON
row written to `runs.jsonl`.
"""

from __future__ import annotations

import math
import time
from collections.abc import Iterable
from dataclasses import asdict, dataclass, field, fields
from typing import Any, Literal

__all__ = ["Grade", "JobStats", "RunError", "Step", "StepKind", "SubScore", "Trace"]

StepKind = Literal["task", "user", "assistant", "tool_call", "tool_result", "model_turn"]


@dataclass(frozen=True, slots=True)
class SubScore:
    """One named component of a grade."""

    name: str
    value: float
    weight: float = 1.0


@dataclass(slots=True)
class Grade:
    """An evaluation of one answer: a reward, and how it was reached.

    A template yields one as its second yield when a bare number is not enough; the
    engine reads one back from every `tasks.grade`. When `reward` is omitted it is the
    weighted mean of `subscores`, which may be `SubScore`s or wire dicts and are kept
    as wire dicts (a peer's extra keys survive).
    """

    reward: float = math.nan
    subscores: list[Any] = field(default_factory=list)
    info: dict[str, Any] = field(default_factory=dict)
    content: str | None = None
    is_error: bool = False
    done: bool | None = None

    def __post_init__(self) -> None:
        if not self.subscores:  # most grades: a bare reward
            self.subscores = []  # a fresh list still, not the caller's
            return
        self.subscores = [
            {"name": s.name, "value": s.value, "weight": s.weight} if isinstance(s, SubScore) else s
            for s in self.subscores
        ]
        if math.isnan(self.reward):
            self.reward = _weighted_mean(self.subscores, self.reward)

    @property
    def metrics(self) -> dict[str, Any]:
        """The metrics recorded beside the reward (`info["metrics"]`; they never weigh)."""
        metrics = self.info.get("metrics")
        return metrics if isinstance(metrics, dict) else {}

    def add_subscores(self, subscores: Iterable[SubScore | dict[str, Any]], *, name: str) -> None:
        """Add `subscores` and make `reward` the weighted mean of them all.

        A grade that had none keeps its reward as a first subscore named `name`
        (weight 1.0), so that reward still counts (group rewards join a grade so).
        """
        added = [
            {"name": s.name, "value": s.value, "weight": s.weight} if isinstance(s, SubScore) else s
            for s in subscores
        ]
        if not added:
            return
        if not self.subscores:
            self.subscores = [{"name": name, "value": self.reward, "weight": 1.0}]
        self.subscores = [*self.subscores, *added]
        self.reward = _weighted_mean(self.subscores, self.reward)

    @classmethod
    def from_wire(cls, data: dict[str, Any]) -> Grade:
        """Parse a `tasks.grade` result (`score` becomes `reward`)."""
        score = data.get("score")
        if isinstance(score, bool) or not isinstance(score, _NUMBER) or not math.isfinite(score):
            raise ValueError(f"grade has no finite numeric score: {score!r}")
        info = data.get("info")
        info = dict(info) if info else {}
        if not _WIRE_KEYS.issuperset(data):
            # a reward dict with keys a grade has no place for: say so, not silently
            warning = f"reward dict has unknown keys {sorted(set(data) - _WIRE_KEYS)}; ignored"
            info["proctor_warnings"] = [*info.get("proctor_warnings", ()), warning]
        subscores = data.get("subscores")
        return cls(
            float(score),
            list(subscores) if subscores else [],
            info,
            data.get("content"),
            bool(data.get("isError", False)),
            data.get("done"),
        )

    def to_dict(self) -> dict[str, Any]:
        """Every field by its Python name, as JSON (what run records keep)."""
        return {f.name: getattr(self, f.name) for f in fields(self)}

    def to_wire(self) -> dict[str, Any]:
        """The `tasks.grade` result for this grade."""
        out: dict[str, Any] = {"score": self.reward}
        if self.subscores:
            out["subscores"] = self.subscores
        if self.info:
            out["info"] = self.info
        if self.content is not None:
            out["content"] = self.content
        if self.done is not None:
            out["done"] = self.done
        if self.is_error:
            out["isError"] = True
        return out


def _weighted_mean(subscores: list[Any], default: float) -> float:
    """The mean of the subscores' values by weight (`default` when no weight)."""
    parts = [(float(s["value"]), float(s.get("weight", 1.0))) for s in subscores]
    total = sum(weight for _, weight in parts)
    return sum(value * weight for value, weight in parts) / total if total else default


_WIRE_KEYS = frozenset({"score", "subscores", "info", "content", "done", "isError"})
_NUMBER = (int, float)  # a tuple: `int | float` builds a union on every call


@dataclass(slots=True)
class Step:
    """One typed event of a trace, with wall-clock start and end (epoch seconds).

    `kind` is `task` (with `phase` setup/evaluate in `data`), `user`, `assistant`,
    `tool_call`, `tool_result` or `model_turn`.
    """

    kind: StepKind
    content: Any = None
    data: dict[str, Any] | None = None
    start: float = 0.0
    end: float = 0.0


@dataclass(slots=True)
class Trace:
    """Everything that happened in one rollout; `content` is the agent's answer."""

    id: str
    steps: list[Step] = field(default_factory=list)
    content: Any = None

    def add(
        self, kind: StepKind, content: Any = None, *, start: float | None = None, **data: Any
    ) -> Step:
        """Append a step ending now (starting at `start`, default now) and return it."""
        now = time.time()
        step = Step(kind, content, data or None, now if start is None else start, now)
        self.steps.append(step)
        return step

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready form."""
        return {"id": self.id, "content": self.content, "steps": [asdict(s) for s in self.steps]}

    def conversation(self) -> list[dict[str, Any]]:
        """The conversational steps (`user`, `assistant`, `tool_call`, `tool_result`) as
        `{"kind", "content", "data"}` dicts: what `tasks.grade` sends as `trace`
        (never a model turn's body)."""
        return [
            {"kind": s.kind, "content": s.content, "data": s.data}
            for s in self.steps
            if s.kind in _CONVERSATIONAL
        ]


_CONVERSATIONAL = frozenset({"user", "assistant", "tool_call", "tool_result"})


@dataclass(frozen=True, slots=True)
class RunError:
    """Why a run failed: the phase, the exception type and its message.

    `traceback` is the formatted traceback (the environment server's first when the
    error came over the wire, then the local one), bounded and with secret values
    redacted; None when there was none (e.g. a cancelled run).
    """

    phase: str
    type: str
    message: str
    traceback: str | None = None


@dataclass(frozen=True, slots=True)
class JobStats:
    """Summary of a job: mean reward over graded runs, errors counted apart."""

    runs: int
    graded: int
    errors: int
    mean_reward: float | None
    errors_by_phase: dict[str, int]
