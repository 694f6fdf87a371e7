"""`proctor run` checks every row against the environment's templates before the
first rollout, and refuses (or with `--allow-invalid` drops) the rows that do not fit."""

from __future__ import annotations

import sys
from typing import TYPE_CHECKING

from ._common import CLIError
from ._run_sources import is_remote

if TYPE_CHECKING:
    from ._run_plan import RunPlan

__all__ = ["check_rows"]


async def check_rows(plan: RunPlan) -> None:
    """Check every row against the environment's templates before the first rollout:
    in this process for the local runtime, in a child process (as the batch plan does)
    for the runtimes that start processes, by schema through `tasks.list` for a
    server. Refuse with every bad row listed, or with `--allow-invalid` drop them.

    Raises:
        CLIError: a bad row (without `--allow-invalid`), or no environment to ask.
    """
    where = plan.where
    if where.imported is not None and where.served is None:
        return  # an importer's rows, for the environment it serves on its own runtime
    from ..batch import row_problems
    from ..tasks import row_places

    remote = is_remote(where.runtime)
    try:
        problems = await row_problems(
            plan.taskset,
            served=where.served,
            url=where.runtime if remote else None,
            token=where.token,
            ready_timeout=plan.ready_timeout,
            sources=(plan.source, where.env_source, where.env_name),
        )
    except ValueError as exc:
        raise CLIError(str(exc)) from None
    if not problems:
        return
    places = row_places(plan.source, plan.taskset)
    lines = [f"  {places[slug]}: {problems[slug]}" for slug in places if slug in problems]
    head = f"{len(problems)} of {len(plan.taskset)} rows do not fit the environment"
    if not plan.allow_invalid:
        raise CLIError(f"{head} (--allow-invalid runs the others):\n" + "\n".join(lines))
    print(f"warning: {head}; skipped (--allow-invalid):", *lines, sep="\n", file=sys.stderr)
    plan.taskset = plan.taskset.exclude(problems)
