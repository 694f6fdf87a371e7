"""`proctor validate`: check a taskset's rows and, with `--oracle`, that its tasks are sound."""

from __future__ import annotations

import argparse
import dataclasses
import os
import sys
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from .._usererror import print_error
from ._common import CLIError, print_json, read_token, run_async, split_source

if TYPE_CHECKING:
    from ..engine import Timeouts
    from ..tasks import Taskset, ValidationReport
    from ._run_sources import Where

__all__ = ["cmd_validate"]


def cmd_validate(args: argparse.Namespace) -> int:
    """Validate the taskset; exit 0 when every row is ok, 1 when any is broken, 2 on a
    usage error (a bad option, a missing file)."""
    from .._errors import TasksetError
    from ..tasks import ValidationReport
    from ._run_sources import load_taskset

    try:
        setup = _setup(args)
    except CLIError as exc:
        print_error(str(exc))
        return 2
    try:
        taskset = load_taskset(setup.source, setup.foreign, args.limit)
    except TasksetError as exc:
        report = ValidationReport(setup.source, args.oracle, [], error=str(exc))
        return _report(args, report, {})
    report = run_async(_validate(args, setup, taskset), fast=True)
    return _report(args, report, _places(setup.source, taskset))


@dataclass(slots=True)
class _Setup:
    """Where the environments run, checked as `proctor run` checks them."""

    source: str
    where: Where
    timeouts: Timeouts
    max_concurrent: int | None
    foreign: Any = None  # a foreign task source (`proctor.importers.detect`)


def _setup(args: argparse.Namespace) -> _Setup:
    """The options checked, as `proctor run` checks them (its helpers, imported).

    Raises:
        CLIError: a usage error.
    """
    from ..engine import Timeouts
    from ._run_sources import CHILDREN, Where, check_source, imported_source, parse_runtime

    source, env_name = split_source(args.source, args.env)
    if not os.path.lexists(source):
        raise CLIError(f"{source}: no such file")
    runtime = parse_runtime(args.runtime)
    env_source = args.env_source or source
    imported = imported_source(source, args.limit)
    if imported is None:
        check_source(runtime, env_source)
    timeouts = Timeouts(rollout=args.timeout) if args.timeout else Timeouts.bounded()
    max_concurrent = args.max_concurrent
    if max_concurrent is None and (runtime in CHILDREN or imported is not None):
        max_concurrent = 2 * (os.cpu_count() or 1)
    where = Where(runtime, env_source, env_name, read_token(args.token_env))
    if imported is not None:
        where.imported = imported.runtime
        if not isinstance(imported.environment, str):
            where.served = imported.environment
    deadlines = dataclasses.replace(timeouts, connect=args.ready_timeout)
    return _Setup(source, where, deadlines, max_concurrent, imported)


async def _validate(args: argparse.Namespace, setup: _Setup, taskset: Taskset) -> ValidationReport:
    """Bring the runtime up as `proctor run` does and validate every row on it."""
    from ..tasks import validate
    from ._run_sources import is_remote, open_runtime

    where = setup.where
    envs = sorted({task.env for task in taskset})
    if where.env_name is None and len(envs) == 1 and not is_remote(where.runtime):
        where.env_name = envs[0]  # picks the rows' environment when the source has several
    if where.runtime == "local" and setup.foreign is None:
        from ..runtimes import find_environment

        where.served = find_environment(where.env_source, where.env_name)
    async with open_runtime(where) as runtime:
        return await validate(
            taskset,
            runtime=runtime,
            oracle=args.oracle,
            max_concurrent=setup.max_concurrent,
            timeout=setup.timeouts,
        )


def _places(source: str, taskset: Taskset) -> dict[str, str]:
    """Each row's `file:line (slug)`, or `file row N (slug)`."""
    from ..tasks import row_places

    places = row_places(source, taskset)
    return {s: p if p.endswith(f"({s})") else f"{p} ({s})" for s, p in places.items()}


def _report(args: argparse.Namespace, report: ValidationReport, places: dict[str, str]) -> int:
    if args.json:
        print_json(report.to_dict())
    else:
        _print(report, places)
    return 0 if report.ok else 1


def _print(report: ValidationReport, places: dict[str, str]) -> None:
    out = sys.stdout
    if report.error is not None:
        print(f"broken: {report.error}", file=out)
        print(f"{report.taskset}: the taskset could not be loaded", file=out)
        return
    for check in report.broken:
        print(f"broken: {places.get(check.slug, check.slug)}: {check.reason}", file=out)
    total, broken = len(report.tasks), len(report.broken)
    how = "rows and oracle runs" if report.oracle else "rows only; --oracle also runs them"
    print(
        f"{report.taskset}: {total} tasks, {total - broken} ok, {broken} broken ({how})",
        file=out,
    )
