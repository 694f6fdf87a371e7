"""Inspect AI `@task` files as rows and a proctor environment graded by Inspect's scorers.

Imports inspect_ai: runs in the interpreter that has it (`python -m
proctor.importers._inspect rows|serve FILE`), never in the driver's.

Each `@task` of the file is a template (its id the task's name) of one environment (the
file's stem); each sample of its dataset a row with args `input`, `target`, `id`,
`choices`, `metadata` (as Inspect's `Sample`). The prompt is the sample's input (the
task's solver is the proctor agent); the grade runs each of the task's scorers on a
`TaskState` holding the input, the answer as the assistant's last message and model
output, and the sample's target, choices and metadata.
"""

from __future__ import annotations

import asyncio
import importlib.util
import logging
import math
import os
import sys
from collections.abc import AsyncGenerator
from pathlib import Path
from typing import Any

from ..env import Environment
from ..records import Task

__all__ = ["inspect_environment", "inspect_rows", "load_tasks"]

MODEL = "proctor/agent"  # the model name the TaskState carries

log = logging.getLogger("proctor.importers.inspect")


def load_tasks(path: str, task_args: dict[str, Any] | None = None) -> dict[str, Any]:
    """Name -> `inspect_ai.Task` for each `@task` function of the file at `path`,
    called with `task_args` (those it takes), in the file's folder.

    The working directory becomes the file's folder, as `inspect eval` makes it, so
    relative paths (a dataset file) resolve there; this process serves this one file.
    A `@task` that raises when called (e.g. `get_model()` with no model configured) is
    left out with a warning naming it and its error.

    Raises:
        ValueError: no `@task` function, or none that could be built.
    """
    import inspect as pyinspect

    from inspect_ai._util.registry import is_registry_object, registry_unqualified_name  # type: ignore[import-not-found,unused-ignore]

    file = Path(path).resolve()
    os.chdir(file.parent)
    module = _import(file)
    tasks, failed = {}, {}
    for obj in vars(module).values():
        if is_registry_object(obj, type="task"):
            name = registry_unqualified_name(obj)
            params = pyinspect.signature(obj).parameters
            args = {k: v for k, v in (task_args or {}).items() if k in params}
            try:
                tasks[name] = obj(**args)
            except Exception as exc:
                failed[name] = f"{type(exc).__name__}: {str(exc).strip().splitlines()[0]}"
    for name, error in failed.items():
        log.warning("%s: @task %s left out, it raised when called: %s", path, name, error)
    if not tasks:
        why = "".join(f"; {name}: {error}" for name, error in failed.items())
        raise ValueError(
            f"{path}: no @task function could be built{why}"
            if failed
            else f"{path}: no @task function"
        )
    return tasks


def _import(path: Path) -> Any:
    if str(path.parent) not in sys.path:
        sys.path.insert(0, str(path.parent))
    spec = importlib.util.spec_from_file_location(f"_proctor_inspect_{path.stem}", path)
    if spec is None or spec.loader is None:
        raise ValueError(f"{path}: not a Python file")
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    return module


def inspect_rows(path: str, tasks: dict[str, Any]) -> list[Task]:
    """One row per sample of each task (slug `<task>-<sample id>`)."""
    env = Path(path).stem
    return [
        _row(env, name, i, sample)
        for name, task in tasks.items()
        for i, sample in enumerate(task.dataset)
    ]


def _row(env: str, template: str, i: int, sample: Any) -> Task:
    sample_id = sample.id if sample.id is not None else i + 1
    args: dict[str, Any] = {"input": _input(sample.input), "target": sample.target, "id": sample_id}
    if sample.choices:
        args["choices"] = list(sample.choices)
    if sample.metadata:
        args["metadata"] = sample.metadata
    target = sample.target if isinstance(sample.target, str) else (sample.target or [""])[0]
    return Task(env=env, id=template, args=args, slug=f"{template}-{sample_id}", solution=target)


def _input(value: Any) -> Any:
    if isinstance(value, str):
        return value
    return [m.model_dump(mode="json", exclude_none=True) for m in value]


def inspect_environment(path: str, tasks: dict[str, Any]) -> Environment:
    """The environment serving `tasks` (from `load_tasks(path)`), one template each."""
    env = Environment(Path(path).stem)
    for name, task in tasks.items():
        _template(env, name, list(task.scorer or []))
    return env


def _template(env: Environment, name: str, scorers: list[Any]) -> None:
    @env.template(id=name)
    async def sample(
        input: Any,
        target: str | list[str] = "",
        id: Any = None,
        choices: list[str] | None = None,
        metadata: dict[str, Any] | None = None,
    ) -> AsyncGenerator[Any, Any]:
        """One Inspect sample: its input, then the task's scorers on the answer."""
        messages = _messages(input)
        several = isinstance(target, list) and len(target) > 1
        if choices:
            _ask_choices(messages, choices, several)
        answer = yield _prompt(messages)
        state = _state(messages, answer, target, id, choices, metadata)
        if choices:
            _mark_choices(state, several)
        yield await grade(scorers, state)


def _prompt(messages: list[Any]) -> Any:
    """The input's text when it is one user message, else its messages."""
    if len(messages) == 1 and messages[0].role == "user":
        return messages[0].text
    return [{"role": m.role, "content": m.text} for m in messages]


def _messages(value: Any) -> list[Any]:
    from inspect_ai.model import ChatMessage, ChatMessageUser  # type: ignore[import-not-found,unused-ignore]
    from pydantic import TypeAdapter

    if isinstance(value, str):
        return [ChatMessageUser(content=value)]
    return list(TypeAdapter(list[ChatMessage]).validate_python(value))


def _ask_choices(messages: list[Any], choices: list[str], several: bool) -> None:
    """The first user message worded as Inspect's `multiple_choice()` solver words it."""
    from inspect_ai.solver._multiple_choice import (  # type: ignore[import-not-found,unused-ignore]
        MULTIPLE_ANSWER_TEMPLATE,
        SINGLE_ANSWER_TEMPLATE,
        prompt,
    )
    from inspect_ai.solver._task_state import Choices  # type: ignore[import-not-found,unused-ignore]

    user = next(m for m in messages if m.role == "user")
    template = MULTIPLE_ANSWER_TEMPLATE if several else SINGLE_ANSWER_TEMPLATE
    user.text = prompt(user.text, Choices(choices), template)


def _mark_choices(state: Any, several: bool) -> None:
    """The choices the answer names (`ANSWER: B`) marked, as `multiple_choice()` does."""
    from inspect_ai.solver._multiple_choice import (  # type: ignore[import-not-found,unused-ignore]
        parse_answers,
        set_choices_based_on_generated_response,
    )

    answers = parse_answers(state, several)
    if answers:
        set_choices_based_on_generated_response(state, answers)


def _state(
    messages: list[Any], answer: Any, target: Any, sample_id: Any, choices: Any, metadata: Any
) -> Any:
    from inspect_ai.model import ChatMessageAssistant, ModelName, ModelOutput  # type: ignore[import-not-found,unused-ignore]
    from inspect_ai.scorer import Target  # type: ignore[import-not-found,unused-ignore]
    from inspect_ai.solver import TaskState  # type: ignore[import-not-found,unused-ignore]

    text = answer if isinstance(answer, str) else "" if answer is None else str(answer)
    return TaskState(
        model=ModelName(MODEL),
        sample_id=sample_id if sample_id is not None else 0,
        epoch=1,
        input=messages,
        messages=[*messages, ChatMessageAssistant(content=text)],
        target=Target(target),
        choices=choices,
        output=ModelOutput.from_content(MODEL, text),
        completed=True,
        metadata=metadata,
    )


async def grade(scorers: list[Any], state: Any) -> dict[str, Any]:
    """The grade: one subscore (weight 1) per scorer value, their mean the score.

    Inspect's own `Score` (value, answer, explanation) is in `info.scores`; a scorer that
    raises, or whose value is not a number in [0, 1] once mapped as Inspect maps it
    (`value_to_float`: C 1, I 0, P 0.5, N 0), is in `info.errors` and marks the grade
    `isError` (its subscore 0).
    """
    from inspect_ai._util.registry import registry_unqualified_name  # type: ignore[import-not-found,unused-ignore]

    subscores: list[dict[str, Any]] = []
    info: dict[str, Any] = {"scores": {}, "errors": {}}
    for i, scorer in enumerate(scorers):
        name = registry_unqualified_name(scorer)
        name = name if name not in info["scores"] else f"{name}_{i}"
        try:
            score = await scorer(state, state.target)
        except asyncio.CancelledError:
            raise
        except Exception as exc:
            score = None
            _failed(subscores, info, name, exc)
        if score is not None:
            info["scores"][name] = score.model_dump(
                mode="json", include={"value", "answer", "explanation"}, exclude_none=True
            )
            _subscores(subscores, info, name, score.value)
    return _composed(subscores, info)


def _subscores(out: list[dict[str, Any]], info: dict[str, Any], name: str, value: Any) -> None:
    """`value` as subscores: one, or one per key of a dict value (`name/key`)."""
    items = value.items() if isinstance(value, dict) else [(None, value)]
    for key, each in items:
        label = name if key is None else f"{name}/{key}"
        try:
            out.append({"name": label, "value": _unit(each), "weight": 1.0})
        except ValueError as exc:
            _failed(out, info, label, exc)


def _unit(value: Any) -> float:
    from inspect_ai.scorer import value_to_float  # type: ignore[import-not-found,unused-ignore]

    if isinstance(value, list | dict):
        raise ValueError(f"value {value!r:.80} is not a scalar")
    number = float(value_to_float()(value))
    if not (math.isfinite(number) and 0.0 <= number <= 1.0):
        raise ValueError(f"value {value!r:.80} is not in [0, 1]")
    return number


def _failed(out: list[dict[str, Any]], info: dict[str, Any], name: str, exc: Exception) -> None:
    text = f"{type(exc).__name__}: {exc}"
    out.append({"name": name, "value": 0.0, "weight": 1.0, "info": {"error": text}})
    info["errors"][name] = text


def _composed(subscores: list[dict[str, Any]], info: dict[str, Any]) -> dict[str, Any]:
    score = sum(s["value"] for s in subscores) / len(subscores) if subscores else 0.0
    errors = info.pop("errors")
    if errors:
        return {
            "score": score,
            "subscores": subscores,
            "info": {**info, "errors": errors},
            "isError": True,
        }
    return {"score": score, "subscores": subscores, "info": info}
