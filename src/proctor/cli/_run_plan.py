"""What `proctor run` decides before anything starts: its options checked, the
taskset and agent loaded, where the run is recorded."""

from __future__ import annotations

import argparse
import os
import re
import secrets
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ._common import CLIError, read_token, split_source
from ._run_agent import agent_label, build_agent, judge_proxy, user_proxy
from ._run_sources import (
    CHILDREN,
    Where,
    check_source,
    imported_source,
    is_remote,
    load_taskset,
    parse_runtime,
)

if TYPE_CHECKING:
    from ..engine import Timeouts
    from ..env import Environment
    from ..proxy import InterceptionProxy
    from ..tasks import Taskset

__all__ = ["DEFAULT_RUNS_DIR", "RunPlan", "plan_run"]

DEFAULT_RUNS_DIR = "proctor-runs"
"""Where `proctor run` records, unless `--output-dir` or `$PROCTOR_RUNS_DIR` says."""


@dataclass(slots=True)
class RunPlan:
    """Everything `proctor run` decided before anything starts."""

    source: str
    taskset: Taskset
    agent: Any
    agent_label: str  # which agent ran, as the summary and the record say
    model: str | None
    proxy: InterceptionProxy | None
    judge: InterceptionProxy | None  # the proxy graders.judge rewards call
    where: Where
    group: int
    max_concurrent: int | None
    timeouts: Timeouts
    ready_timeout: float
    output: str | None
    record: str | None  # the output directory to create, None with --no-record
    batch_id: str  # `<taskset>-<UTC stamp>-<4 hex>`, the default record's folder name
    allow_invalid: bool
    user: InterceptionProxy | None = None  # the proxy simulated users (`ModelUser`) ask


def plan_run(args: argparse.Namespace) -> RunPlan:
    """Check the options and load the taskset and agent, cheap checks first (a typo
    should not wait for the taskset to import)."""
    from ..engine import Timeouts
    from ..tasks import Taskset

    source, env_name = split_source(args.source, args.env)
    runtime = parse_runtime(args.runtime)
    env_source = args.env_source or source
    imported = imported_source(source, args.limit)
    _check_files(args, runtime, env_source, imported is not None)
    taskset = load_taskset(source, imported, args.limit)
    if not len(taskset):
        raise CLIError(f"{source}: the taskset has no rows")
    if Path(source).is_dir() and imported is None:  # read through some files: say which
        files = ", ".join(p.name for p in Taskset.source_files(source))
        print(f"tasks: {len(taskset)} rows from {files} in {source}", file=sys.stderr)
    row_envs = sorted({task.env for task in taskset})
    if env_name is None and len(row_envs) == 1 and not is_remote(runtime):
        env_name = row_envs[0]  # picks the rows' environment when the source has several
    served = None
    if imported is not None and isinstance(imported.environment, str):
        env_source = imported.environment  # the importer's environment (Harbor's)
    elif imported is not None:
        served = imported.environment  # served in this process (an OpenEnv adapter)
    elif runtime == "local" and imported is None:
        served = _served(source, env_source, env_name, row_envs)
    _check_groups(taskset, args.group)
    agent, proxy = build_agent(args, source, env_source)
    max_concurrent = args.max_concurrent
    own_runtime = None if imported is None else imported.runtime
    if max_concurrent is None and (runtime in CHILDREN or own_runtime is not None):
        max_concurrent = 2 * (os.cpu_count() or 1)
    batch_id = _batch_id(taskset.name or "run")
    return RunPlan(
        source,
        taskset,
        agent,
        agent_label(args, agent),
        args.model,
        proxy,
        judge_proxy(args.judge_model),
        Where(runtime, env_source, env_name, read_token(args.token_env), served, own_runtime),
        group=args.group,
        max_concurrent=max_concurrent,
        timeouts=Timeouts(rollout=args.timeout) if args.timeout else Timeouts.bounded(),
        ready_timeout=args.ready_timeout,
        output=args.output,
        record=_record_dir(args, batch_id),
        batch_id=batch_id,
        allow_invalid=args.allow_invalid,
        user=user_proxy(args.user_model),
    )


def _check_groups(taskset: Taskset, group: int) -> None:
    """Refuse `--group 1` for rows whose environment has group rewards."""
    from ..engine import check_group_rewards

    try:
        check_group_rewards(taskset, group)
    except ValueError as exc:
        raise CLIError(f"{exc}; pass --group N") from None


def _record_dir(args: argparse.Namespace, batch_id: str) -> str | None:
    """Where the run is recorded: `--output-dir`, else a new folder under
    `$PROCTOR_RUNS_DIR` (default `./proctor-runs`) named `<taskset>-<UTC stamp>-<4 hex>`."""
    if args.no_record:
        if args.output_dir:
            raise CLIError("--output-dir and --no-record contradict each other")
        return None
    if args.output_dir:
        return os.path.abspath(str(args.output_dir))
    root = os.environ.get("PROCTOR_RUNS_DIR") or DEFAULT_RUNS_DIR
    return os.path.abspath(os.path.join(root, batch_id))


def _check_files(
    args: argparse.Namespace, runtime: str, env_source: str, imported: bool = False
) -> None:
    if not imported:
        check_source(runtime, env_source)
    if args.output and os.path.lexists(args.output):
        raise CLIError(f"{args.output} already exists; --output writes a new file")
    if args.output_dir and os.path.lexists(args.output_dir):
        raise CLIError(f"{args.output_dir} already exists; --output-dir must be new")


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


def _batch_id(name: str) -> str:
    """`<name>-<UTC stamp>-<4 hex>`, in the characters a folder name may safely hold."""
    safe = re.sub(r"[^A-Za-z0-9._-]+", "-", name).strip("-.") or "run"
    stamp = time.strftime("%Y%m%dT%H%M%S", time.gmtime())
    return f"{safe[:40]}-{stamp}-{secrets.token_hex(2)}"
