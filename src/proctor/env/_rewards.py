"""Rewards, metrics, lifecycle hooks and solutions: functions injected by parameter name.

`Scoring` is the registration half (mixed into `Environment` and `Template`); `Plan` is
what one template runs, gathered from its environment and itself; `Context` holds the
values one task run injects. Group rewards (`GroupMember`, `evaluate_group`) are
evaluated by the driver once every rollout of a group has ended.
"""

from __future__ import annotations

import asyncio
import contextvars
import inspect
import math
import os
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Protocol, TypeVar, overload

from .._errors import TemplateError

if TYPE_CHECKING:
    from ..records import Task
    from ._workspace import Workspace

__all__ = [
    "CURRENT_EPISODE",
    "INJECTABLE",
    "Context",
    "Episode",
    "GradeContext",
    "GroupMember",
    "GroupReward",
    "Plan",
    "Scorer",
    "Scoring",
    "TaskView",
    "evaluate_group",
]

INJECTABLE = frozenset(
    {
        "task",
        "answer",
        "prompt",
        "trace",
        "run",
        "stop_reason",
        "judge",
        "state",
        "workspace",
        "dialogue",
    }
)
"""Names every injected function may take; capability names come on top."""

F = TypeVar("F", bound=Callable[..., Any])


@dataclass(frozen=True, slots=True)
class TaskView:
    """The task as a reward sees it when its template declares no `input=` model.

    `id` is the template id, `args` the bound args; each arg is also an attribute.
    """

    id: str
    args: dict[str, Any]

    def __getattr__(self, name: str) -> Any:
        if name.startswith("__") or name in ("id", "args"):
            raise AttributeError(name)
        try:
            return self.args[name]
        except KeyError:
            raise AttributeError(f"task {self.id!r} has no arg {name!r}") from None


@dataclass(frozen=True, slots=True)
class GradeContext:
    """Everything about one task run, injected as `run`.

    `trace` is the run's conversational steps (`[]` unless the driver sent them) and
    `capabilities` maps each capability name to its server object (`ShellServer` for
    `add_shell`, the MCP server for `add_mcp`, else the `Capability`); `workspace` is
    the tracked workspace's `WorkspaceDiff` (None when none is tracked).
    """

    task: Any
    prompt: Any
    answer: Any
    trace: list[dict[str, Any]]
    stop_reason: str | None
    capabilities: Mapping[str, Any]
    workspace: Any = None


@dataclass(frozen=True, slots=True)
class Scorer:
    """One registered function and the parameter names injected into it."""

    name: str
    fn: Callable[..., Any]
    params: tuple[str, ...]
    weight: float = 1.0
    timeout: float | None = None


def scorer(fn: Callable[..., Any], known: Iterable[str], what: str, **options: Any) -> Scorer:
    """A `Scorer` for `fn`, its parameters checked against the injectable `known` names.

    Raises:
        TemplateError: `fn` is not callable or takes a name that cannot be injected.
    """
    if not callable(fn):
        raise TemplateError(f"{what}: {fn!r} is not callable")
    name = options.pop("name", None) or getattr(fn, "__name__", what)
    return Scorer(name, fn, _params(fn, frozenset(known), what), **options)


def _params(fn: Callable[..., Any], known: frozenset[str], what: str) -> tuple[str, ...]:
    out = []
    for p in inspect.signature(fn).parameters.values():
        if p.kind in (p.VAR_POSITIONAL, p.VAR_KEYWORD):
            continue
        if p.name in known and p.kind is not p.POSITIONAL_ONLY:
            out.append(p.name)
        elif p.default is p.empty:
            raise TemplateError(
                f"{what} {getattr(fn, '__qualname__', fn)}: cannot inject parameter "
                f"{p.name!r}; known names: {', '.join(sorted(known))}"
            )
    return tuple(out)


def _weight(weight: float, what: str) -> float:
    if isinstance(weight, bool) or not isinstance(weight, int | float):
        raise TemplateError(f"{what}: weight must be a number; got {weight!r}")
    if not (math.isfinite(weight) and weight >= 0):
        raise TemplateError(f"{what}: weight must be finite and >= 0; got {weight!r}")
    return float(weight)


def _timeout(timeout: float | None, what: str) -> float | None:
    if timeout is not None and not timeout > 0:
        raise TemplateError(f"{what}: timeout must be > 0 seconds; got {timeout!r}")
    return timeout


class Scoring:
    """Registers rewards, metrics and setup/finalize hooks on an environment or template.

    Every registered function may be sync or async; its parameters are injected by name
    (`task`, `answer`, `prompt`, `trace`, `run`, `stop_reason`, `judge`, `state`,
    `workspace`, `dialogue`, and each capability's name). A name that cannot be injected is a
    `TemplateError` now. `track_workspace` declares a folder whose changes during the
    agent phase are recorded.
    """

    def __init__(self) -> None:
        self._rewards: list[Scorer] = []
        self._metrics: list[Scorer] = []
        self._setups: list[Scorer] = []
        self._finalizers: list[Scorer] = []
        self._workspace: Workspace | None = None
        self._generation = 0  # counts registrations, so a cached `Plan` knows it is stale

    def _known_names(self) -> frozenset[str]:
        """The parameter names functions registered here may take."""
        return INJECTABLE

    def _taken_names(self) -> set[str]:
        """Reward and metric names already in use where a new one would clash."""
        return {s.name for s in (*self._rewards, *self._metrics)}

    def _objects(self) -> Mapping[str, Any]:
        """Capability name -> the object injected under that name."""
        return {}

    @overload
    def reward(self, fn: F, /) -> F: ...
    @overload
    def reward(
        self, fn: None = None, /, *, weight: float = 1.0, name: str | None = None
    ) -> Callable[[F], F]: ...

    def reward(
        self, fn: F | None = None, /, *, weight: float = 1.0, name: str | None = None
    ) -> F | Callable[[F], F]:
        """Register a reward: a number in [0, 1], one weighted subscore of the grade."""
        return self._register(
            self._rewards, fn, "reward", name=name, weight=_weight(weight, "reward")
        )

    @overload
    def metric(self, fn: F, /) -> F: ...
    @overload
    def metric(self, fn: None = None, /, *, name: str | None = None) -> Callable[[F], F]: ...

    def metric(self, fn: F | None = None, /, *, name: str | None = None) -> F | Callable[[F], F]:
        """Register a metric: a number recorded in the grade's `info.metrics`, never weighed."""
        return self._register(self._metrics, fn, "metric", name=name)

    @overload
    def setup(self, fn: F, /) -> F: ...
    @overload
    def setup(self, fn: None = None, /, *, timeout: float = 60.0) -> Callable[[F], F]: ...

    def setup(self, fn: F | None = None, /, *, timeout: float = 60.0) -> F | Callable[[F], F]:
        """Register a hook run at `tasks.start`, before the template's body."""
        return self._register(self._setups, fn, "setup", timeout=_timeout(timeout, "setup"))

    @overload
    def finalize(self, fn: F, /) -> F: ...
    @overload
    def finalize(self, fn: None = None, /, *, timeout: float = 60.0) -> Callable[[F], F]: ...

    def finalize(self, fn: F | None = None, /, *, timeout: float = 60.0) -> F | Callable[[F], F]:
        """Register a hook run at `tasks.grade`, before the answer is sent in and rewards run."""
        return self._register(
            self._finalizers, fn, "finalize", timeout=_timeout(timeout, "finalize")
        )

    def track_workspace(
        self,
        path: str | os.PathLike[str],
        *,
        include: Iterable[str] = (),
        exclude: Iterable[str] = (),
        max_files: int = 100_000,
        max_text_bytes: int = 64 * 1024,
        max_total_text: int = 1024 * 1024,
        max_hash_bytes: int = 1024 * 1024 * 1024,
    ) -> None:
        """Record what the agent creates, modifies and deletes under `path`.

        A snapshot is taken after the first yield and another when grading begins
        (before finalize hooks); their `WorkspaceDiff` is injected as `workspace` and
        sent with the grade (the driver's `run.workspace`, a batch's
        `artifacts/workspace.json`). `include`/`exclude` are `fnmatch` patterns on the
        relative path (an excluded folder is not entered); at most `max_files` entries
        are walked, files up to `max_text_bytes` that are UTF-8 text have their content
        (created) or a unified diff (modified) kept, up to `max_total_text` in all, and
        no file past `max_hash_bytes` is read. A template's own call replaces its
        environment's. See `docs/rewards.md`.

        Raises:
            TemplateError: an empty path, a bad pattern or a bound that is not >= 1.
        """
        from ._workspace import Workspace

        self._workspace = Workspace.of(
            path, include, exclude, max_files, max_text_bytes, max_total_text, max_hash_bytes
        )
        self._generation += 1

    def _register(
        self, into: list[Scorer], fn: F | None, what: str, **options: Any
    ) -> F | Callable[[F], F]:
        def register(f: F) -> F:
            made = scorer(f, self._known_names(), what, **options)
            scored = into is self._rewards or into is self._metrics
            if scored and made.name in self._taken_names():
                raise TemplateError(f"{what} {made.name!r}: a reward or metric has that name")
            into.append(made)
            self._generation += 1
            return f

        return register(fn) if fn is not None else register


@dataclass(frozen=True, slots=True)
class Plan:
    """What one template runs, its environment's functions first, then its own."""

    setups: tuple[Scorer, ...] = ()
    finalizers: tuple[Scorer, ...] = ()
    rewards: tuple[Scorer, ...] = ()
    metrics: tuple[Scorer, ...] = ()
    solution: Scorer | None = None
    objects: Mapping[str, Any] = field(default_factory=dict)
    needs: tuple[str, ...] = ()
    """What `tasks.grade` must carry: `trace` (for `trace` or `run`) and/or `judge`."""
    workspace: Workspace | None = None
    """The tracked folder: the innermost scope's `track_workspace`, if any."""

    @classmethod
    def of(
        cls, scopes: Sequence[Scoring], solution: Scorer | None, objects: Mapping[str, Any]
    ) -> Plan:
        """Gather the functions of `scopes` (outermost first)."""
        setups, finalizers, rewards, metrics = (
            tuple(s for scope in scopes for s in getattr(scope, kind))
            for kind in ("_setups", "_finalizers", "_rewards", "_metrics")
        )
        every = [*setups, *finalizers, *rewards, *metrics, *([solution] if solution else [])]
        names = {n for s in every for n in s.params}
        wanted = [("trace", {"trace", "run"}), ("judge", {"judge"})]
        needs = tuple(need for need, by in wanted if names & by)
        tracked = [s._workspace for s in scopes if s._workspace is not None]
        workspace = tracked[-1] if tracked else None
        return cls(setups, finalizers, rewards, metrics, solution, objects, needs, workspace)


@dataclass(slots=True)
class Episode:
    """One task run's simulated users: the `user` endpoint params the driver sent with
    `tasks.start` (a proxy session's URL and secret, never a provider key) and the
    dialogues its template opened (`UserServer.open` adds them while the run starts)."""

    user_model: Any = None
    dialogues: list[Any] = field(default_factory=list)

    def messages(self) -> list[Any]:
        """Every dialogue's `Message`s, agent and user, in the order they were said."""
        if len(self.dialogues) == 1:
            return list(self.dialogues[0].messages)
        return sorted((m for d in self.dialogues for m in d.messages), key=lambda m: m.at)


CURRENT_EPISODE: contextvars.ContextVar[Episode | None] = contextvars.ContextVar(
    "proctor_episode", default=None
)
"""The starting task run's `Episode`, set by its runner while setup and the template's
body run (so `ModelUser` and `UserServer.open` find it)."""


class Context:
    """The values injected into one task run's functions; `state` lives as long as it.

    `dialogue` is the episode's conversation (`episode.messages()`), read when injected.
    """

    def __init__(self, task: Callable[[], Any], objects: Mapping[str, Any]) -> None:
        self._task = task
        self._task_value: Any = _UNSET
        self.objects = objects
        self.values: dict[str, Any] = {
            "prompt": None,
            "answer": None,
            "trace": [],
            "stop_reason": None,
            "judge": None,
            "state": {},
            "workspace": None,
        }
        self.judge_params: Any = None
        self.episode = Episode()

    def graded(self, answer: Any, payload: Mapping[str, Any]) -> None:
        """Take in what `tasks.grade` carries: the parsed answer, trace, stop reason, judge."""
        trace = payload.get("trace")
        stop = payload.get("stop_reason")
        self.values.update(
            answer=answer,
            trace=trace if isinstance(trace, list) else [],
            stop_reason=stop if isinstance(stop, str) else None,
        )
        self.judge_params = payload.get("judge")

    def value(self, name: str) -> Any:
        """The value injected as `name`."""
        if name == "task":
            if self._task_value is _UNSET:
                self._task_value = self._task()
            return self._task_value
        if name == "run":
            return self.grade_context()
        if name == "dialogue":
            return self.episode.messages()
        if name == "judge" and self.values["judge"] is None and self.judge_params:
            self.values["judge"] = _make_judge(self.judge_params)
        if name in self.values:
            return self.values[name]
        return self.objects[name]

    def grade_context(self) -> GradeContext:
        """The `run` value: this task run so far."""
        v = self.values
        return GradeContext(
            self.value("task"),
            v["prompt"],
            v["answer"],
            v["trace"],
            v["stop_reason"],
            self.objects,
            v["workspace"],
        )

    async def call(self, s: Scorer) -> Any:
        """Call `s` with its parameters injected, awaiting it when it is async."""
        result = s.fn(**{n: self.value(n) for n in s.params})
        if inspect.isawaitable(result):
            result = await result
        return result


_UNSET: Any = object()


def _make_judge(params: Any) -> Any:
    """The `Judge` for the grade's `judge` param (imported only when a function takes one)."""
    from ._judge import Judge

    return Judge.from_params(params if isinstance(params, dict) else None)


# -- group rewards -----------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class GroupMember:
    """One graded (or failed) rollout of a group, as a group reward sees it.

    `reward` is None when the run was not graded; `error` then says why.
    """

    slug: str
    task: Task
    answer: Any
    reward: float | None
    subscores: list[dict[str, Any]] = field(default_factory=list)
    metrics: dict[str, float] = field(default_factory=dict)
    stop_reason: str | None = None
    trace_id: str | None = None
    error: str | None = None


@dataclass(frozen=True, slots=True)
class GroupReward:
    """A registered group reward: `fn(runs) -> list[float] | float`, weighed by `weight`."""

    name: str
    fn: Callable[..., Any]
    weight: float = 0.0


def group_reward(fn: Callable[..., Any], *, weight: float, name: str | None) -> GroupReward:
    """A checked `GroupReward` for `fn`.

    Raises:
        TemplateError: `fn` is not callable or the weight is negative or not finite.
    """
    if not callable(fn):
        raise TemplateError(f"group_reward: {fn!r} is not callable")
    label = str(name or getattr(fn, "__name__", "group_reward"))
    return GroupReward(label, fn, _weight(weight, f"group_reward {label!r}"))


class GroupRewarded(Protocol):
    """What `evaluate_group` reads of an environment: its group rewards."""

    @property
    def group_rewards(self) -> Sequence[GroupReward]: ...


async def evaluate_group(
    env: GroupRewarded, members: Sequence[GroupMember]
) -> tuple[dict[str, list[float]], dict[str, str]]:
    """Run every group reward of `env` on `members`: values per name, and errors per name.

    A reward returning one number gives it to every member; a list must have one
    finite number per member, in [0, 1] when it has a weight (it becomes a subscore).
    One that raises or returns anything else is left out of the values and recorded in
    the errors as `"Type: message"`.
    """
    values: dict[str, list[float]] = {}
    errors: dict[str, str] = {}
    runs = list(members)
    for reward in env.group_rewards:
        try:
            result = reward.fn(runs)
            if inspect.isawaitable(result):
                result = await result
            values[reward.name] = _group_values(result, len(runs), reward.weight > 0)
        except asyncio.CancelledError:
            raise
        except Exception as exc:
            errors[reward.name] = f"{type(exc).__name__}: {exc}"
    return values, errors


def _group_values(result: Any, n: int, weighed: bool) -> list[float]:
    if not isinstance(result, list | tuple):
        values = [finite(result)] * n
    elif len(result) != n:
        raise ValueError(f"returned {len(result)} values for a group of {n}")
    else:
        values = [finite(v) for v in result]
    outside = [v for v in values if not 0.0 <= v <= 1.0]
    if weighed and outside:  # it becomes a subscore, whose value is in [0, 1]
        raise ValueError(f"returned {outside[0]!r}, outside [0, 1], with a weight")
    return values


def finite(value: Any) -> float:
    """`value` as a float when it is a finite number (bools count as 0 and 1).

    Raises:
        TypeError: not a number.
        ValueError: not finite.
    """
    if not isinstance(value, bool | int | float):
        raise TypeError(f"returned {type(value).__name__} {value!r:.80}, not a number")
    try:
        f = float(value)
    except OverflowError:
        f = math.inf
    if not math.isfinite(f):
        raise ValueError(f"returned {value!r:.80}, not a finite number")
    return f
