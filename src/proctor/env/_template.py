"""`Template`: a registered two-yield async generator that mints `Task` rows."""

from __future__ import annotations

import contextlib
import inspect
import typing
from collections.abc import AsyncGenerator, Callable
from typing import TYPE_CHECKING, Any

from .._errors import TaskError, TemplateError
from ._rewards import INJECTABLE, Plan, Scorer, Scoring, TaskView, scorer
from ._types import Answer

if TYPE_CHECKING:
    from pydantic import TypeAdapter

    from ..records import Task

__all__ = ["Template", "TemplateFn"]

TemplateFn = Callable[..., AsyncGenerator[Any, Any]]

_PASS = object()  # marks a parameter whose values need no coercion


class Template(Scoring):
    """A task template registered on an environment.

    Calling it with arguments mints a `Task` row; nothing runs until a server starts it.
    `@template.reward`, `.metric`, `.setup` and `.finalize` register functions for this
    template alone (see `Scoring`); `solution` is its reference solution, if any.
    """

    def __init__(
        self,
        env_name: str,
        fn: TemplateFn,
        *,
        id: str,
        description: str = "",
        input: Any = None,
        returns: Any = None,
        solution: Any = None,
        scope: Scoring | None = None,
    ) -> None:
        """`scope` is the environment whose functions run before this template's own."""
        super().__init__()
        if not inspect.isasyncgenfunction(fn):
            raise TemplateError(
                f"template {id!r}: {getattr(fn, '__qualname__', fn)!r} must be an async "
                "generator function (async def with two yields)"
            )
        self.env_name = env_name
        self.fn = fn
        self.id = id
        self.description = description or (inspect.getdoc(fn) or "").split("\n\n")[0]
        self.input = input
        self.returns = returns
        self._scope = scope
        self._plan: Plan | None = None
        self._plan_key = (0, 0)
        self._solution: Scorer | None = None
        if solution is not None:
            self._solution = scorer(solution, self._known_names(), f"template {id!r} solution")
        self._params = inspect.signature(fn).parameters
        self._names = frozenset(self._params)
        self._var_kw = any(p.kind is p.VAR_KEYWORD for p in self._params.values())
        self._required = frozenset(
            n
            for n, p in self._params.items()
            if p.default is p.empty and p.kind in (p.POSITIONAL_OR_KEYWORD, p.KEYWORD_ONLY)
        )
        self._hints = _hints(fn)
        self._coercers: dict[str, Any] = {}
        self._answer_adapter: TypeAdapter[Any] | None = None
        self._schema: dict[str, Any] | None = None

    def __repr__(self) -> str:
        return f"<Template {self.env_name}/{self.id}>"

    def __call__(self, **args: Any) -> Task:
        """Mint a `Task` row with these args (names checked, values coerced at start)."""
        from ..records import Task

        self._check_names(args, TemplateError)
        return Task(env=self.env_name, id=self.id, args=args)

    @property
    def solution(self) -> Any:
        """The reference solution function (`solution=`), or None."""
        return None if self._solution is None else self._solution.fn

    def plan(self) -> Plan:
        """What a run of this template calls: its environment's functions, then its own."""
        scope = self._scope
        key = (self._generation, -1 if scope is None else scope._generation)
        if self._plan is None or self._plan_key != key:
            if scope is None:
                self._plan = Plan.of([self], self._solution, {})
            else:
                self._plan = Plan.of([scope, self], self._solution, scope._objects())
            self._plan_key = key
        return self._plan

    def task_view(self, args: dict[str, Any]) -> Any:
        """The `task` injected for these bound args: the `input=` model, else a `TaskView`."""
        if self.input is None:
            return TaskView(self.id, dict(args))
        from pydantic import TypeAdapter

        return TypeAdapter(self.input).validate_python(args)

    def _known_names(self) -> frozenset[str]:
        return INJECTABLE if self._scope is None else self._scope._known_names()

    def _taken_names(self) -> set[str]:
        taken = super()._taken_names()
        return taken if self._scope is None else taken | Scoring._taken_names(self._scope)

    def bind(self, args: dict[str, Any]) -> dict[str, Any]:
        """Check and coerce args by the annotations, before any task code runs.

        Raises:
            TaskError: unknown or missing names, or a value the annotation rejects.
        """
        self._check_names(args, TaskError)
        out = args
        for name, value in args.items():
            coerce = self._coercers.get(name)
            if coerce is None:
                coerce = self._coercers[name] = self._make_coercer(name)
            if coerce is _PASS:
                continue
            try:
                coerced = coerce.validate_python(value)
            except Exception as exc:  # pydantic.ValidationError, imported lazily
                raise TaskError(f"{self.id}: argument {name!r}: {_first_error(exc)}") from None
            if coerced is value:
                continue
            if out is args:
                out = dict(args)
            out[name] = coerced
        return out

    def parse_answer(self, raw: Any) -> Any:
        """The value sent into the generator: raw, or `Answer[T]` when `returns=T`."""
        if self.returns is None:
            return raw
        from pydantic import TypeAdapter, ValidationError

        if self._answer_adapter is None:
            self._answer_adapter = TypeAdapter(self.returns)
        adapter = self._answer_adapter
        try:
            if isinstance(raw, str) and self.returns is not str:
                try:
                    return Answer(adapter.validate_json(raw), raw)
                except ValidationError:
                    pass
            return Answer(adapter.validate_python(raw), raw)
        except ValidationError as exc:
            return Answer(None, raw, exc.errors()[0]["msg"])

    def info(self) -> dict[str, Any]:
        """This template's entry in `tasks.list`.

        A type pydantic cannot describe is published as `{}` (any value) rather than
        breaking the listing of the whole environment.
        """
        if self._schema is None:
            self._schema = {
                "id": self.id,
                "description": self.description,
                "args": self._args_schema(),
            }
            if self.returns is not None:
                self._schema["returns"] = _schema_of(self.returns)
        return self._schema

    def _check_names(self, args: dict[str, Any], error: type[Exception]) -> None:
        if (self._var_kw or self._names.issuperset(args)) and args.keys() >= self._required:
            return  # the common case, checked without a loop in Python
        if not self._var_kw:
            unknown = [n for n in args if n not in self._params]
            if unknown:
                raise error(
                    f"{self.id}: unknown argument(s) {', '.join(map(repr, unknown))}; "
                    f"expected {', '.join(self._params) or 'none'}"
                )
        missing = [n for n in self._required if n not in args]
        if missing and error is TaskError:
            raise error(f"{self.id}: missing argument(s) {', '.join(map(repr, sorted(missing)))}")

    def _make_coercer(self, name: str) -> Any:
        hint = self._hints.get(name, Any)
        if hint is Any:
            return _PASS
        if hint in (str, int, bool, float, dict, list):
            return _FastCoercer(hint)
        from pydantic import TypeAdapter

        return TypeAdapter(hint)

    def _args_schema(self) -> dict[str, Any]:
        from pydantic import TypeAdapter

        if self.input is not None:
            return _schema_of(self.input)
        props: dict[str, Any] = {}
        for name, p in self._params.items():
            if p.kind in (p.VAR_KEYWORD, p.VAR_POSITIONAL):
                continue
            hint = self._hints.get(name, Any)
            schema = _schema_of(hint)
            if p.default is not p.empty:
                # A default that is not JSON is simply not published.
                with contextlib.suppress(Exception):
                    schema["default"] = TypeAdapter(Any).dump_python(p.default, mode="json")
            props[name] = schema
        schema = {"type": "object", "properties": props, "additionalProperties": self._var_kw}
        required = [n for n in self._params if n in self._required]
        if required:
            schema["required"] = required
        return schema


class _FastCoercer:
    """Skip pydantic (and its import) when the value already has the builtin type."""

    __slots__ = ("adapter", "tp")

    def __init__(self, tp: type) -> None:
        self.tp = tp
        self.adapter: TypeAdapter[Any] | None = None

    def validate_python(self, value: Any) -> Any:
        if type(value) is self.tp:
            return value
        if self.tp is float and type(value) is int:
            return float(value)
        if self.adapter is None:
            from pydantic import TypeAdapter

            self.adapter = TypeAdapter(self.tp)
        return self.adapter.validate_python(value)


def _schema_of(tp: Any) -> dict[str, Any]:
    from pydantic import TypeAdapter

    if tp is Any:
        return {}
    try:
        return TypeAdapter(tp).json_schema()
    except Exception:  # an arbitrary class, a callable...: say nothing rather than fail
        return {}


def _first_error(exc: Exception) -> str:
    errors = getattr(exc, "errors", None)
    if callable(errors):
        first = errors()
        if first:
            return str(first[0].get("msg", exc))
    return str(exc)


def _hints(fn: TemplateFn) -> dict[str, Any]:
    try:
        return typing.get_type_hints(fn)
    except Exception as exc:
        raise TemplateError(f"{fn.__qualname__}: cannot resolve annotations: {exc}") from exc
