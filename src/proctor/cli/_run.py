"""`proctor run`: roll out a taskset with an agent, show progress, summarize, record."""

from __future__ import annotations

import argparse
import contextlib
import os
import sys
import time
from collections.abc import AsyncIterator
from dataclasses import dataclass
from pathlib import Path
from typing import IO, TYPE_CHECKING, Any

from ._common import CLIError, print_json, read_token, run_async, split_source, table

if TYPE_CHECKING:
    from ..agents import Run
    from ..engine import Job
    from ..env import Environment
    from ..proxy import InterceptionProxy
    from ..runtimes import RuntimeLike
    from ..tasks import Taskset

__all__ = ["cmd_run"]


def cmd_run(args: argparse.Namespace) -> int:
    """Run every row `--group` times; exit 1 with `--strict` if any run failed."""
    plan = _plan(args)
    job, wall = _execute(plan)
    return _report(args, job, wall)


# -- plan -------------------------------------------------------------------------------


@dataclass(slots=True)
class _Plan:
    """Everything `proctor run` decided before anything starts."""

    taskset: Taskset
    agent: Any
    proxy: InterceptionProxy | None
    runtime: str
    served: Environment | None  # the environment a local runtime serves
    env_source: str
    env_name: str | None
    group: int
    max_concurrent: int | None
    rollout_timeout: float | None
    ready_timeout: float
    token: str | None
    output: str | None


def _plan(args: argparse.Namespace) -> _Plan:
    """Check the options and load the taskset and agent, cheap checks first (a typo
    should not wait for the taskset to import)."""
    from ..tasks import Taskset

    source, env_name = split_source(args.source, args.env)
    runtime = _parse_runtime(args.runtime)
    env_source = args.env_source or source
    _check_files(args, runtime, env_source)
    taskset = Taskset.from_file(source)
    if not len(taskset):
        raise CLIError(f"{source}: the taskset has no rows")
    row_envs = sorted({task.env for task in taskset})
    if env_name is None and len(row_envs) == 1 and not _remote(runtime):
        env_name = row_envs[0]  # picks the rows' environment when the source has several
    served = _served(source, env_source, env_name, row_envs) if runtime == "local" else None
    agent, proxy = _agent(args, source, env_source)
    max_concurrent = args.max_concurrent
    if max_concurrent is None and runtime in _CHILDREN:
        max_concurrent = 2 * (os.cpu_count() or 1)
    return _Plan(
        taskset,
        agent,
        proxy,
        runtime,
        served,
        env_source,
        env_name,
        group=args.group,
        max_concurrent=max_concurrent,
        rollout_timeout=args.timeout,
        ready_timeout=args.ready_timeout,
        token=read_token(args.token_env),
        output=args.output,
    )


def _check_files(args: argparse.Namespace, runtime: str, env_source: str) -> None:
    if not _remote(runtime) and not _is_python(env_source):
        raise CLIError(
            f"{env_source} is not a Python source, so it defines no environment; "
            "pass --env-source PATH.py (or --runtime tcp://HOST:PORT)"
        )
    if runtime in _CHILDREN and not Path(env_source).exists():
        raise CLIError(f"{env_source}: no such file")
    if args.output and os.path.lexists(args.output):
        raise CLIError(f"{args.output} already exists; --output writes a new file")


def _served(source: str, env_source: str, env_name: str | None, row_envs: list[str]) -> Environment:
    """The environment the local runtime serves; every row must be for it."""
    from ..runtimes import find_environment

    served = find_environment(env_source, env_name)
    others = [name for name in row_envs if name != served.name]
    if others:
        raise CLIError(
            f"{source} has rows for environment {', '.join(map(repr, others))} but "
            f"{env_source} serves {served.name!r}; pass --env-source"
        )
    return served


# -- agent ------------------------------------------------------------------------------


def _agent(
    args: argparse.Namespace, source: str, env_source: str
) -> tuple[Any, InterceptionProxy | None]:
    """The agent `--agent`, `--model` or `--harness` names, and the harness's proxy."""
    from .._loader import load_agent
    from ..agents import agent_from_fn

    if (args.harness_env or args.no_jail) and args.harness is None:
        raise CLIError("--harness-env and --no-jail apply to --harness")
    if args.model or args.harness:
        return _model_agent(args)
    return load_agent(args.agent, source, env_source, wrap=agent_from_fn), None


def _model_agent(args: argparse.Namespace) -> tuple[Any, InterceptionProxy | None]:
    """`--model` alone: a `ToolAgent`; with `--harness`: a `CommandAgent` behind a proxy.

    Raises:
        CLIError: conflicting or incomplete options, a bad model string, a missing key.
    """
    import shlex

    from .._errors import ModelError

    if args.agent != "builtin":
        raise CLIError("--agent cannot be combined with --model or --harness")
    if not args.model:
        raise CLIError("--harness needs --model: the upstream its proxy forwards to")
    from ..models import parse_model

    try:
        spec = parse_model(args.model)
    except ValueError as exc:
        raise CLIError(f"--model: {exc}") from None
    if (
        spec.api_key_env
        and not os.environ.get(spec.api_key_env)
        and spec.base_url.startswith("https://")
    ):
        raise CLIError(f"--model {args.model}: set {spec.api_key_env} (keys never go in arguments)")
    if args.harness is None:
        from ..agents import ToolAgent

        if args.max_tokens or args.max_cost:
            raise CLIError("--max-tokens and --max-cost need --harness (they are proxy budgets)")
        try:
            return ToolAgent(args.model, max_steps=args.max_turns or 30), None
        except ModelError as exc:
            raise CLIError(f"--model: {exc}") from None
    from ..agents import CommandAgent
    from ..proxy import InterceptionProxy, ModelLimits

    argv = shlex.split(args.harness)
    if not argv:
        raise CLIError("--harness: empty command")
    limits = ModelLimits(
        max_turns=args.max_turns, max_total_tokens=args.max_tokens, max_cost=args.max_cost
    )
    agent = CommandAgent(argv, pass_env=args.harness_env, jail=not args.no_jail)
    return agent, InterceptionProxy(spec, limits=limits)


def _remote(runtime: str) -> bool:
    return runtime.startswith(("tcp://", "unix://"))


def _is_python(source: str) -> bool:
    path = Path(source)
    return path.suffix == ".py" or path.is_dir() or not path.exists()


# -- runtime ----------------------------------------------------------------------------


# Runtimes that serve each rollout from a child process of the given source.
_CHILDREN = ("subprocess", "warm", "sandbox", "sandbox-warm")


def _parse_runtime(text: str) -> str:
    if text == "local" or text in _CHILDREN:
        return text
    if text.startswith(("tcp://", "unix://")):
        return text
    raise CLIError(
        "--runtime: expected local, subprocess, warm, sandbox, sandbox-warm, tcp://HOST:PORT "
        f"or unix:///PATH, got {text!r}"
    )


@contextlib.asynccontextmanager
async def _provider(
    runtime: str,
    served: Environment | None,
    env_source: str,
    env_name: str | None,
    ready_timeout: float,
    token: str | None = None,
) -> AsyncIterator[RuntimeLike]:
    from ..runtimes import LocalRuntime, SubprocessRuntime, UrlRuntime

    if runtime == "local":
        # Entered once so the environment starts once for the batch, and a failing
        # initialize hook fails here with one message instead of once per run.
        assert served is not None
        local = LocalRuntime(served)
        async with local:
            yield local
    elif runtime == "subprocess":
        yield SubprocessRuntime(env_source, env_name=env_name)
    elif runtime == "warm":
        async with SubprocessRuntime(env_source, env_name=env_name, warm=True) as warm:
            yield warm
    elif runtime in ("sandbox", "sandbox-warm"):
        from ..runtimes import SandboxRuntime

        sandbox = SandboxRuntime(env_source, env_name=env_name, warm=runtime == "sandbox-warm")
        async with sandbox:
            yield sandbox
    else:
        from ..channel import connect

        async with connect(runtime, ready_timeout=ready_timeout, token=token):
            pass  # fail fast when nothing answers there
        yield UrlRuntime(runtime, token=token)


# -- execution --------------------------------------------------------------------------


def _execute(plan: _Plan) -> tuple[Job, float]:
    """Run the plan, writing each finished run to `--output` (a new file) if given."""
    writer = _Writer(plan.output) if plan.output else None
    try:
        job, wall = run_async(_rollouts(plan, writer), fast=True)
    except BaseException:
        if writer is not None:
            writer.close(keep_empty=False)  # a run that never started leaves no file
        raise
    if writer is not None:
        writer.close()
    return job, wall


async def _rollouts(plan: _Plan, writer: _Writer | None) -> tuple[Job, float]:
    import asyncio

    from ..engine import run_taskset

    progress = Progress(len(plan.taskset) * plan.group, sys.stderr)

    def on_run(run: Run) -> None:
        if writer is not None:
            writer(run)
        progress.update(run)

    async with contextlib.AsyncExitStack() as stack:
        provider = await stack.enter_async_context(
            _provider(
                plan.runtime,
                plan.served,
                plan.env_source,
                plan.env_name,
                plan.ready_timeout,
                plan.token,
            )
        )
        if plan.proxy is not None:
            await stack.enter_async_context(plan.proxy)
        ticker = asyncio.get_running_loop().create_task(progress.tick())
        t0 = time.perf_counter()
        try:
            job = await run_taskset(
                plan.taskset,
                plan.agent,
                runtime=provider,
                group=plan.group,
                max_concurrent=plan.max_concurrent,
                rollout_timeout=plan.rollout_timeout,
                on_run=on_run,
                name=plan.taskset.name,
                proxy=plan.proxy,
            )
        finally:
            wall = time.perf_counter() - t0
            ticker.cancel()
            progress.close()
    return job, wall


class _Writer:
    """Append one JSON line per finished run, flushed, so a crash keeps what ran.

    The file must be new (`x` mode): a second run never mixes its rows into the first.
    """

    def __init__(self, path: str) -> None:
        import orjson

        try:
            self.file = open(path, "xb")  # noqa: SIM115 - closed by close()
        except FileExistsError:
            raise CLIError(f"{path} already exists; --output writes a new file") from None
        self.path = path
        self.rows = 0
        self.dumps = orjson.dumps
        self.option = orjson.OPT_NON_STR_KEYS

    def __call__(self, run: Run) -> None:
        # One write per line: a reader (or a crash) never sees half a row.
        self.file.write(self.dumps(run.to_dict(), default=str, option=self.option) + b"\n")
        self.file.flush()
        self.rows += 1

    def close(self, *, keep_empty: bool = True) -> None:
        self.file.close()
        if not keep_empty and not self.rows:
            with contextlib.suppress(OSError):
                os.unlink(self.path)


class Progress:
    """A one-line `\\r` bar on stderr (only when stderr is a terminal)."""

    WIDTH = 24

    def __init__(self, total: int, stream: IO[str]) -> None:
        self.total = total
        self.stream = stream
        self.enabled = stream.isatty()
        self.done = 0
        self.errors = 0
        self.t0 = time.perf_counter()
        self.last = 0.0

    def update(self, run: Run) -> None:
        self.done += 1
        if run.error is not None:
            self.errors += 1
        if self.done == self.total or time.perf_counter() - self.last >= 0.1:
            self.draw()

    async def tick(self) -> None:
        import asyncio

        while self.enabled:
            self.draw()
            await asyncio.sleep(0.5)

    def draw(self) -> None:
        if not self.enabled:
            return
        self.last = time.perf_counter()
        filled = self.WIDTH * self.done // max(self.total, 1)
        bar = "#" * filled + "-" * (self.WIDTH - filled)
        self.stream.write(
            f"\r[{bar}] {self.done}/{self.total}  errors {self.errors}  {self.last - self.t0:.1f}s "
        )
        self.stream.flush()

    def close(self) -> None:
        if self.enabled:
            self.draw()
            self.stream.write("\n")
            self.stream.flush()
            self.enabled = False


# -- summary ----------------------------------------------------------------------------


def summarize(job: Job, wall: float) -> dict[str, Any]:
    """The job's totals plus one row per template, JSON-ready."""
    by_template: dict[tuple[str, str], list[Run]] = {}
    for run in job.runs:
        by_template.setdefault((run.task.env, run.task.id), []).append(run)
    several_envs = len({env for env, _ in by_template}) > 1
    templates = []
    for (env, tid), runs in by_template.items():
        rewards = [r.reward for r in runs if r.reward is not None]
        templates.append(
            {
                "template": f"{env}/{tid}" if several_envs else tid,
                "env": env,
                "id": tid,
                "runs": len(runs),
                "graded": len(rewards),
                "mean_reward": sum(rewards) / len(rewards) if rewards else None,
                "errors": sum(1 for r in runs if r.error is not None),
            }
        )
    first_errors: dict[tuple[str, str, str], dict[str, Any]] = {}
    for run in job.runs:
        err = run.error
        if err is not None and len(first_errors) < 3:
            key = (err.phase, err.type, err.message)
            first_errors.setdefault(
                key,
                {"slug": run.slug, "phase": err.phase, "type": err.type, "message": err.message},
            )
    return {
        **job.to_dict(),
        "wall_time_s": wall,
        "rollouts_per_s": len(job.runs) / wall if wall > 0 else None,
        "templates": templates,
        "first_errors": list(first_errors.values()),
    }


def _report(args: argparse.Namespace, job: Job, wall: float) -> int:
    """Print the summary (a table, or JSON with `--json`); the exit code."""
    summary = summarize(job, wall)
    if args.json:
        summary.update(agent=args.agent, runtime=args.runtime, output=args.output)
        print_json(summary)
    else:
        print(render(summary))
    return 1 if args.strict and job.stats.errors else 0


def _mean(value: float | None) -> str:
    return "-" if value is None else f"{value:.3f}"


def render(summary: dict[str, Any]) -> str:
    """The human summary: a table per template, a total row, timing and errors."""
    rows = [
        (t["template"], t["runs"], _mean(t["mean_reward"]), t["errors"])
        for t in summary["templates"]
    ]
    rows.append(("total", summary["runs"], _mean(summary["mean_reward"]), summary["errors"]))
    lines = [table(("template", "runs", "mean reward", "errors"), rows, right={1, 2, 3})]
    runs, rate = summary["runs"], summary["rollouts_per_s"]
    timing = f"\n{runs} rollout{'' if runs == 1 else 's'} in {summary['wall_time_s']:.2f}s"
    lines.append(timing + (f" ({rate:.1f}/s)" if rate else ""))
    phases = summary["errors_by_phase"]
    if phases:
        lines.append("errors by phase: " + ", ".join(f"{p} {n}" for p, n in sorted(phases.items())))
        for err in summary["first_errors"]:
            message = err["message"].splitlines()[0] if err["message"] else ""
            lines.append(f"  {err['slug']} [{err['phase']}] {err['type']}: {message}")
    return "\n".join(lines)
