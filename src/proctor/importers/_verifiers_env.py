"""A verifiers (0.4.0, `verifiers.v1`) taskset as rows and a proctor environment.

Imports verifiers: runs in the interpreter that has it (`python -m
proctor.importers._verifiers rows|serve PKG`), never in the driver's.

Each task's data (`TaskData`, its `idx` aside) becomes a row's args; the environment's
one template (`task`) prompts with the data's prompt (and system prompt) and is graded
by the task's `@vf.reward` functions, one proctor subscore each with the reward's weight,
its `@vf.metric` functions landing in `info.metrics`. They are called the way
`vf.Task.score` calls them (`task` = the data, `trace` = a `vf.Trace` of the run's
conversation whose `last_reply` is the answer), each on its own so that one raising is
recorded beside the others.
"""

from __future__ import annotations

import asyncio
import inspect
import json
import logging
import sys
from collections.abc import Callable, Iterator, Mapping
from pathlib import Path
from typing import Any

from ..env import Environment
from ..records import Task

__all__ = ["load_taskset", "verifiers_environment", "verifiers_rows"]

log = logging.getLogger("proctor.importers.verifiers")

TEMPLATE = "task"
REWARD_METRIC = "verifiers_reward"  # verifiers' own reward: the weighted sum
_STATE_KEY = "verifiers_scores"


def load_taskset(target: str, **options: Any) -> Any:
    """The `vf.Taskset` of a verifiers environment package (a folder) or installed id.

    `options` are the taskset config's fields (e.g. `num_tasks=`).
    """
    import verifiers.v1 as vf  # type: ignore[import-not-found,unused-ignore]
    from verifiers.v1.utils.loaders import taskset_config_type  # type: ignore[import-not-found,unused-ignore]

    taskset_id = _importable(target)
    _refuse_unsupported_env(taskset_id)
    config = taskset_config_type(taskset_id)(id=taskset_id, **options)
    return vf.load_taskset(config)


def _refuse_unsupported_env(taskset_id: str) -> None:
    """Refuse a package whose exported `vf.Env` is not a plain `SingleAgentEnv`: its
    episodes are several agents interacting, or one agent answering user turns its own
    `run(task, agents)` sends (a scripted user), which one proctor agent acting on the
    task's prompt cannot stand for.

    Raises:
        ValueError: such an environment (its class, and the roles of a multi-agent one,
            named).
    """
    import verifiers.v1 as vf  # type: ignore[import-not-found,unused-ignore]
    from verifiers.v1.utils.generic import concrete_type  # type: ignore[import-not-found,unused-ignore]
    from verifiers.v1.utils.loaders import environment_class  # type: ignore[import-not-found,unused-ignore]

    env_cls = environment_class(taskset_id)
    if issubclass(env_cls, vf.SingleAgentEnv):
        if env_cls.run is vf.SingleAgentEnv.run:
            return
        raise ValueError(
            f"{taskset_id} exports {env_cls.__name__}, a verifiers Env whose own run() "
            "drives the episode (user turns after the prompt): not supported, proctor "
            "runs the agent on the task's prompt alone"
        )
    config = concrete_type(env_cls, vf.EnvConfig, origin=vf.Env)
    fields = getattr(config, "model_fields", {})
    roles = [k for k, f in fields.items() if isinstance(f.default, vf.AgentConfig)]
    named = f" (roles: {', '.join(roles)})" if roles else ""
    raise ValueError(
        f"{taskset_id} exports {env_cls.__name__}, a multi-agent verifiers Env{named}: "
        "not supported, proctor runs one agent per task"
    )


def _importable(target: str) -> str:
    """The module name of `target`: a package folder, a project folder holding one
    (its `pyproject.toml` beside it), or already a module name. Puts its root on
    `sys.path`."""
    folder = Path(target)
    if not folder.is_dir():
        return target
    folder = folder.resolve()
    if not (folder / "__init__.py").is_file():
        folder = _package_in(folder)
    root = str(folder.parent)
    if root not in sys.path:
        sys.path.insert(0, root)
    return folder.name


def _package_in(project: Path) -> Path:
    """The one package folder of a project folder (the `vf-init` layout).

    Raises:
        ValueError: none, or several and none named after the project folder.
    """
    found = sorted(p.parent for p in project.glob("*/__init__.py") if p.parent.name.isidentifier())
    named = [p for p in found if p.name == project.name.replace("-", "_")]
    if len(named) == 1 or len(found) == 1:
        return (named or found)[0]
    raise ValueError(f"{project}: expected one package folder, found {[p.name for p in found]}")


def verifiers_rows(taskset: Any, limit: int | None = None) -> list[Task]:
    """One proctor row per task of `taskset` (at most `limit`).

    Raises:
        ValueError: an infinite taskset without a `limit`.
    """
    if not taskset.bounded and limit is None:
        raise ValueError(
            f"{type(taskset).__name__} generates tasks without end: give a limit "
            "(limit=N, or --limit N on the command line)"
        )
    tasks = taskset if limit is None else taskset.take(limit)
    return [_row(taskset.config.id, task) for task in tasks]


def _row(env: str, task: Any) -> Task:
    set_fields = task.data.model_dump(exclude_defaults=True, exclude={"idx"})
    whole = task.data.model_dump(mode="json", exclude={"idx"})  # keeps `role`, `type`
    args = {name: whole[name] for name in set_fields}
    slug = task.data.id or task.data.name or f"{env}-{task.data.idx}"
    answer = args.get("answer")
    return Task(env=env, id=TEMPLATE, args=args, slug=str(slug), solution=answer)


def verifiers_environment(taskset: Any) -> Environment:
    """A proctor environment serving `taskset`'s tasks, graded by their rewards.

    Rewards and metrics that need a verifiers runtime (a `runtime` parameter without
    a default) are left out, as `vf.Task.score` leaves them out without one.
    """
    task_cls = type(taskset).task_type()
    data_cls, config = task_cls.data_type(), taskset.config.task
    env = Environment(taskset.config.id)

    def make(args: dict[str, Any]) -> Any:
        return task_cls(data_cls.model_validate(args), config)

    @env.template(id=TEMPLATE)
    async def task(**data: Any) -> Any:
        """One verifiers task: its prompt, then its rewards grade the answer."""
        yield _prompt(make(data).data)

    probe = task_cls(data_cls.model_construct(), config)
    scores = _Scores(make)
    for fn in _offline(probe.hooks("reward")):
        env.reward(weight=getattr(fn, "_vf_weight", 1.0), name=fn.__name__)(
            scores.reader(fn.__name__)
        )
    for fn in _offline(probe.hooks("metric")):
        env.metric(name=fn.__name__)(scores.reader(fn.__name__))
    if probe.hooks("reward"):
        env.metric(name=REWARD_METRIC)(scores.reader(REWARD_METRIC))
    return env


def _offline(fns: list[Callable[..., Any]]) -> Iterator[Callable[..., Any]]:
    for fn in fns:
        if _needs_runtime(fn):
            log.warning("verifiers %s needs a runtime: left out", fn.__name__)
        else:
            yield fn


def _needs_runtime(fn: Callable[..., Any]) -> bool:
    param = inspect.signature(fn).parameters.get("runtime")
    return param is not None and param.default is inspect.Parameter.empty


def _prompt(data: Any) -> Any:
    """The proctor prompt: the text, or messages when there is a system prompt."""
    messages = _messages(data)
    if len(messages) == 1 and messages[0]["role"] == "user":
        return messages[0]["content"]
    return messages


def _messages(data: Any) -> list[dict[str, Any]]:
    prompt = data.prompt
    out = [{"role": "system", "content": data.system_prompt}] if data.system_prompt else []
    if isinstance(prompt, str):
        return [*out, {"role": "user", "content": prompt}]
    return [*out, *(m.model_dump(mode="json", exclude_none=True) for m in prompt or [])]


class _Scores:
    """Every reward and metric of one task run, computed once (on the first read)."""

    def __init__(self, make: Callable[[dict[str, Any]], Any]) -> None:
        self.make = make

    def reader(self, name: str) -> Callable[..., Any]:
        async def read(
            task: Any,
            answer: Any,
            trace: list[dict[str, Any]],
            stop_reason: Any,
            state: dict[str, Any],
        ) -> float:
            if _STATE_KEY not in state:
                state[_STATE_KEY] = await self.compute(task.args, answer, trace, stop_reason)
            value = state[_STATE_KEY][name]
            if isinstance(value, BaseException):
                raise value
            return value  # type: ignore[no-any-return]

        read.__name__ = name
        return read

    async def compute(
        self, args: dict[str, Any], answer: Any, steps: list[dict[str, Any]], stop: str | None
    ) -> dict[str, Any]:
        """Name -> value (or the exception it raised) for each reward and metric, and
        verifiers' own reward (`REWARD_METRIC`)."""
        from verifiers.v1.utils.decorators import invoke  # type: ignore[import-not-found,unused-ignore]

        vtask = self.make(args)
        available = {"task": vtask.data, "trace": _trace(vtask, answer, steps, stop)}
        rewards = list(_offline(vtask.hooks("reward")))
        fns = [*rewards, *_offline(vtask.hooks("metric"))]

        async def call(fn: Callable[..., Any]) -> Any:
            value = invoke(fn, available)
            value = await value if inspect.isawaitable(value) else value
            if isinstance(value, Mapping):
                raise TypeError(f"returned keyed scores {sorted(value)}: not supported")
            return value

        results = await asyncio.gather(*(call(fn) for fn in fns), return_exceptions=True)
        out = {fn.__name__: result for fn, result in zip(fns, results, strict=True)}
        return {**out, REWARD_METRIC: _weighted_sum(rewards, out)}


def _weighted_sum(rewards: list[Callable[..., Any]], values: dict[str, Any]) -> Any:
    """verifiers' `Trace.reward`: the sum of each reward times its weight (or the error)."""
    failed = [fn.__name__ for fn in rewards if isinstance(values[fn.__name__], BaseException)]
    if failed:
        return ValueError(f"reward(s) failed: {', '.join(failed)}")
    return sum(float(values[fn.__name__]) * getattr(fn, "_vf_weight", 1.0) for fn in rewards)


def _trace(vtask: Any, answer: Any, steps: list[dict[str, Any]], stop: str | None) -> Any:
    """A `vf.Trace` of the run: the prompt, the user and assistant steps, the answer."""
    import verifiers.v1 as vf  # type: ignore[import-not-found,unused-ignore]

    text = answer if isinstance(answer, str) else json.dumps(answer)
    nodes = _nodes(vtask.data, steps, text)
    return vf.Trace(
        task=vf.TraceTask(
            type=type(vtask).__name__, data=vtask.data, key=vtask.key, hash=vtask.hash
        ),
        agent=vf.AgentInfo(config=vf.AgentConfig()),
        nodes=nodes,
        root_reply=text,
        is_completed=True,
        ok=True,
        stop_condition=stop,
    )


def _nodes(data: Any, steps: list[dict[str, Any]], answer: str) -> list[Any]:
    from verifiers.v1.graph import MessageNode  # type: ignore[import-not-found,unused-ignore]

    messages = [(m, False) for m in _messages(data)]
    for step in steps:
        if step.get("kind") in ("user", "assistant"):
            messages.append(
                ({"role": step["kind"], "content": str(step.get("content") or "")}, True)
            )
    if not any(m["role"] == "assistant" and sampled for m, sampled in messages):
        messages.append(({"role": "assistant", "content": answer}, True))
    adapter = _message_adapter()
    return [
        MessageNode(
            parent=i - 1 if i else None,
            message=adapter.validate_python(m),
            sampled=sampled and m["role"] == "assistant",
        )
        for i, (m, sampled) in enumerate(messages)
    ]


def _message_adapter() -> Any:
    from pydantic import TypeAdapter
    from verifiers.v1.types import Message  # type: ignore[import-not-found,unused-ignore]

    return TypeAdapter(Message)
