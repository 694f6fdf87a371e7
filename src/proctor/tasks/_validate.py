"""`validate`: every row fits its environment, and with `oracle` every task is solvable
by its reference solution and not passed by an agent that does nothing."""

from __future__ import annotations

import asyncio
import json
import math
import os
import re
from collections.abc import Callable, Iterable, Iterator
from dataclasses import asdict, dataclass, field
from typing import TYPE_CHECKING, Any

from .._errors import RemoteError, TasksetError
from ._taskset import Taskset

if TYPE_CHECKING:
    from ..agents import Run
    from ..engine import Timeouts
    from ..env import Environment
    from ..records import RunError, Task
    from ..runtimes import RuntimeLike

__all__ = ["TaskCheck", "ValidationReport", "validate"]

_Checker = Callable[["Task"], "str | None"]  # a row's problem with its environment, if any

_NO_SOLUTION = "no solution declared (neither the row's `solution` nor the template's)"


@dataclass(slots=True)
class TaskCheck:
    """One row's validation: `ok`, or broken for `reason`.

    `reference_reward` and `null_reward` are the rewards of the oracle's two runs
    (None without `oracle`, or when that run was not graded); `errors` lists each
    failed run as `"<run>: <phase>: <Type>: <message>"`.
    """

    slug: str
    ok: bool = True
    reason: str | None = None
    reference_reward: float | None = None
    null_reward: float | None = None
    errors: list[str] = field(default_factory=list)

    def to_dict(self) -> dict[str, Any]:
        """This check as a JSON object."""
        return asdict(self)


@dataclass(slots=True)
class ValidationReport:
    """The result of `validate`: one `TaskCheck` per row, in the taskset's order.

    `error` is set when the taskset itself could not be loaded (then `tasks` is empty).
    """

    taskset: str
    oracle: bool
    tasks: list[TaskCheck]
    error: str | None = None

    @property
    def ok(self) -> bool:
        """True when the taskset loaded and every row passed."""
        return self.error is None and all(check.ok for check in self.tasks)

    @property
    def broken(self) -> list[TaskCheck]:
        """The rows that failed, in order."""
        return [check for check in self.tasks if not check.ok]

    def to_dict(self) -> dict[str, Any]:
        """The report as a JSON object: `{taskset, oracle, ok, total, broken, error, tasks}`."""
        return {
            "taskset": self.taskset,
            "oracle": self.oracle,
            "ok": self.ok,
            "total": len(self.tasks),
            "broken": len(self.broken),
            "error": self.error,
            "tasks": [check.to_dict() for check in self.tasks],
        }


async def validate(
    taskset: Taskset | str | os.PathLike[str],
    *,
    runtime: RuntimeLike | None = None,
    oracle: bool = False,
    max_concurrent: int | None = None,
    timeout: Timeouts | float | None = None,  # noqa: ASYNC109 - a Timeouts value
) -> ValidationReport:
    """Check that every row fits its environment; with `oracle`, that every task is sound.

    Each row (and its verifier row) must name a known environment and one of its
    templates, with args that bind. In this process (no `runtime`, or a
    `LocalRuntime`) args are bound exactly as `tasks.start` binds them; on any other
    runtime one substrate per environment is brought up and the rows are checked
    against the published schemas (names only; `oracle` binds them for real).

    With `oracle`, each row that fits runs twice through `proctor.engine.rollout`,
    concurrently: with its reference solution (the row's `solution`, else the
    template's, through `tasks.solve`) and with a null agent answering None. The
    reference must score 1.0 and the null agent strictly less.

    Args:
        taskset: the rows, or a taskset source for `Taskset.from_file` (a load error
            is reported in `ValidationReport.error`).
        runtime: where environments run (default: the rows' environments defined in
            this process).
        oracle: also run the reference and null agents.
        max_concurrent: rollouts at a time (default: all).
        timeout: a `Timeouts`, or a number capping each rollout (default:
            `Timeouts.bounded()`).

    Raises:
        ValueError: `max_concurrent` below 1.
    """
    from ..engine import Timeouts

    if max_concurrent is not None and max_concurrent < 1:
        raise ValueError("max_concurrent must be >= 1")
    loaded = _load(taskset, oracle)
    if isinstance(loaded, ValidationReport):
        return loaded
    limits = Timeouts.bounded() if timeout is None else Timeouts.of(timeout)
    checks = await _check_rows(loaded, runtime, limits, max_concurrent)
    if oracle:
        fit = [task for task in loaded if checks[task.slug].ok]
        await _oracle(fit, checks, runtime, limits, max_concurrent)
    return ValidationReport(loaded.name, oracle, list(checks.values()))


def _load(taskset: Taskset | str | os.PathLike[str], oracle: bool) -> Taskset | ValidationReport:
    """The taskset, or a report of why its source does not load."""
    if isinstance(taskset, Taskset):
        return taskset
    source = os.fspath(taskset)
    try:
        return Taskset.from_file(source)
    except TasksetError as exc:
        return ValidationReport(source, oracle, [], error=str(exc))


def _broken(check: TaskCheck, reason: str) -> None:
    check.ok = False
    check.reason = reason


# -- rows -------------------------------------------------------------------------------


def _rows(tasks: Iterable[Task]) -> Iterator[Task]:
    """Every row and its verifier row."""
    for task in tasks:
        yield task
        if task.verifier is not None:
            yield task.verifier


async def _check_rows(
    taskset: Taskset, runtime: RuntimeLike | None, limits: Timeouts, max_concurrent: int | None
) -> dict[str, TaskCheck]:
    """A check per row, by slug, broken where the row does not fit its environment."""
    checks = {task.slug: TaskCheck(task.slug) for task in taskset}
    checkers = await _checkers(runtime, taskset, limits, max_concurrent)
    for task in taskset:
        problem = checkers[_substrate(task)](task)
        if problem is None and task.verifier is not None:
            verifier = checkers[_substrate(task.verifier)](task.verifier)
            problem = None if verifier is None else f"verifier: {verifier}"
        if problem is not None:
            _broken(checks[task.slug], problem)
    return checks


def _substrate(task: Task) -> tuple[str, str]:
    """What a row's substrate depends on: its environment and its runtime_config (a
    Harbor row's image is its own, so one row's failed build says nothing of another's)."""
    config = task.runtime_config
    return task.env, json.dumps(config, sort_keys=True, default=str) if config else ""


async def _checkers(
    runtime: RuntimeLike | None,
    tasks: Iterable[Task],
    limits: Timeouts,
    max_concurrent: int | None,
) -> dict[tuple[str, str], _Checker]:
    """A checker per substrate the rows need: in this process where the runtime serves
    from it, else through one substrate per environment and runtime_config, at most
    `max_concurrent` brought up at once."""
    from ..env import registered
    from ..runtimes import LocalRuntime

    first = {_substrate(task): task for task in reversed(list(_rows(tasks)))}
    if runtime is None:
        return {key: _in_process(registered(key[0])) for key in first}
    if isinstance(runtime, LocalRuntime):
        served = await _local_environment(runtime)
        if isinstance(served, str):
            return {key: _unreachable(served) for key in first}
        return {key: _in_process(served) for key in first}
    from ..engine import for_each

    checkers: dict[tuple[str, str], _Checker] = {}

    async def bring_up(key: tuple[str, str]) -> None:
        checkers[key] = await _remote(runtime, first[key], limits)

    await for_each(list(first), bring_up, max_concurrent=max_concurrent)
    return {key: checkers[key] for key in first}


async def _local_environment(runtime: Any) -> Environment | str:
    """The environment a `LocalRuntime` serves, or why it could not be loaded."""
    try:
        env: Environment = await runtime._load(None)
    except Exception as exc:
        return _describe(exc)
    return env


def _in_process(env: Environment | None) -> _Checker:
    if env is None:
        return _unreachable("it is not defined in this process")

    def check(task: Task) -> str | None:
        if task.env != env.name:
            return f"its environment {task.env!r} is not the one served ({env.name!r})"
        template = env.tasks.get(task.id)
        if template is None:
            return _no_template(task.id, env.name, env.tasks)
        try:
            template.bind(task.args)
        except Exception as exc:
            return str(exc) or type(exc).__name__
        return None

    return check


async def _remote(runtime: RuntimeLike, task: Task, limits: Timeouts) -> _Checker:
    """Bring up a substrate for `task`, read the served environment's templates."""
    from ..channel import connect

    try:
        async with asyncio.timeout(limits.rollout or limits.start):
            async with (
                runtime(task) as endpoint,
                connect(
                    endpoint.target, ready_timeout=limits.connect, token=endpoint.token
                ) as client,
            ):
                listed = await client.list_tasks()
                served = client.manifest.env_name if client.manifest else ""
    except Exception as exc:
        return _unreachable(_describe(exc))
    templates = {t["id"]: t.get("args") for t in listed if isinstance(t, dict) and "id" in t}
    return lambda row: _schema_problem(served, templates, row)


def _schema_problem(served: str, templates: dict[str, Any], task: Task) -> str | None:
    """`task` checked by name against a served environment's published schemas."""
    if task.env != served:
        return f"its environment {task.env!r} is not the one served ({served!r})"
    if task.id not in templates:
        return _no_template(task.id, served, templates)
    return _args_problem(task, templates[task.id])


def _args_problem(task: Task, schema: Any) -> str | None:
    """Unknown or missing argument names, by the template's JSON schema."""
    if not isinstance(schema, dict) or not isinstance(schema.get("properties"), dict):
        return None
    for what, names in _names_off(task.args, schema):
        if names:
            return f"{task.id}: {what} argument(s) {', '.join(map(repr, names))}"
    return None


def _names_off(args: dict[str, Any], schema: dict[str, Any]) -> list[tuple[str, list[str]]]:
    closed = schema.get("additionalProperties") is False
    unknown = [n for n in args if n not in schema["properties"]] if closed else []
    missing = [n for n in schema.get("required") or () if n not in args]
    return [("unknown", unknown), ("missing", missing)]


def _no_template(template: str, env: str, known: Iterable[str]) -> str:
    names = ", ".join(sorted(known)) or "none"
    return f"no template {template!r} in environment {env!r} (known: {names})"


def _unreachable(why: str) -> _Checker:
    return lambda task: f"environment {task.env!r}: {why}"


def _describe(exc: BaseException) -> str:
    return f"{type(exc).__name__}: {exc}" if str(exc) else type(exc).__name__


# -- oracle -----------------------------------------------------------------------------


class _NoSolution(Exception):
    """The task declares no reference solution."""


async def _reference(run: Run) -> None:
    """The oracle agent: answers with the row's `solution`, else the template's
    (`tasks.solve`, run in the substrate)."""
    if run.task.solution is not None:
        run.answer = run.task.solution
        return
    from ..channel import METHOD_NOT_FOUND

    assert run.client is not None
    try:
        run.answer = await run.client.solve()
    except RemoteError as exc:
        # A server without `tasks.solve` (HUD's, an older proctor) has no solutions either.
        if exc.message.endswith(": declares no solution") or exc.code == METHOD_NOT_FOUND:
            raise _NoSolution(_NO_SOLUTION) from None
        raise


async def _null(run: Run) -> None:
    """The null agent: answers None."""
    run.answer = None


async def _oracle(
    tasks: list[Task],
    checks: dict[str, TaskCheck],
    runtime: RuntimeLike | None,
    limits: Timeouts,
    max_concurrent: int | None,
) -> None:
    """Run every task with the reference and the null agent, at most `max_concurrent`
    rollouts at a time, and judge each pair."""
    from ..engine import default_runtime, for_each, rollout

    where = runtime if runtime is not None else default_runtime()
    jobs = [(task, agent) for task in tasks for agent in (_reference, _null)]
    runs: dict[tuple[str, Any], Run] = {}

    async def one(job: tuple[Task, Any]) -> None:
        task, agent = job
        runs[task.slug, agent] = await rollout(task, agent, runtime=where, timeout=limits)

    await for_each(jobs, one, max_concurrent=max_concurrent)
    for task in tasks:
        _judge(checks[task.slug], runs[task.slug, _reference], runs[task.slug, _null])


def _judge(check: TaskCheck, reference: Run, null: Run) -> None:
    check.reference_reward, check.null_reward = reference.reward, null.reward
    check.errors = [e for e in (_error("reference", reference), _error("null", null)) if e]
    problem = _reference_problem(reference) or _null_problem(null, check.reference_reward)
    if problem is not None:
        _broken(check, problem)


def _error(name: str, run: Run) -> str | None:
    """`<name>: <phase>: <Type>: <message>` for a failed run or evaluation."""
    if run.error is not None and run.error.type != _NoSolution.__name__:
        return f"{name}: {run.error.phase}: {_what(run.error)}"
    if run.grade is not None and run.grade.is_error:
        return f"{name}: grading: evaluation failed: {_grade_errors(run)}"
    return None


def _grade_errors(run: Run) -> str:
    assert run.grade is not None
    errors = run.grade.info.get("errors")
    if isinstance(errors, dict) and errors:
        return "; ".join(f"{name}: {message}" for name, message in errors.items())
    return "the grade is marked as an error"


def _reference_problem(run: Run) -> str | None:
    if run.error is not None and run.error.type == _NoSolution.__name__:
        return _NO_SOLUTION
    failed = _failure("reference", run)
    if failed is not None:
        return failed
    if run.reward is None or not math.isclose(run.reward, 1.0):
        return f"the reference solution scored {_num(run.reward)}, not 1.0"
    return None


def _null_problem(run: Run, reference: float | None) -> str | None:
    failed = _failure("null", run)
    if failed is not None:
        return failed
    if run.reward is not None and reference is not None and run.reward >= reference:
        return f"the null agent scored {_num(run.reward)}: the task is passed without solving it"
    return None


def _failure(name: str, run: Run) -> str | None:
    if run.error is not None:
        return f"the {name} run failed in {run.error.phase}: {_what(run.error)}"
    if run.grade is not None and run.grade.is_error:
        return f"the {name} run's evaluation failed: {_grade_errors(run)}"
    return None


def _what(error: RunError) -> str:
    """`Type: message`; an error the environment answered is its message alone."""
    if error.type in ("RemoteError", "TaskCancelled"):
        return re.sub(r"^\[-?\d+\] ", "", error.message)
    return f"{error.type}: {error.message}"


def _num(value: float | None) -> str:
    return "nothing" if value is None else str(round(value, 4))
