"""`proctor run`: roll out a taskset with an agent, show progress, summarize, record.

The steps, each in its own module: `_run_plan` checks the options and loads the
taskset and agent (`_run_agent`, `_run_sources`), `_run_rollouts` runs and records
every rollout after `_run_rows` checked the rows, `_run_summary` summarizes them.
"""

from __future__ import annotations

import argparse

from ._common import Terminated, print_json
from ._run_plan import RunPlan, plan_run
from ._run_rollouts import Ended, execute_plan
from ._run_summary import render, summarize

__all__ = ["cmd_run"]


def cmd_run(args: argparse.Namespace) -> int:
    """Run every row `--group` times; exit 1 with `--strict` if any run failed."""
    plan = plan_run(args)
    ended = Ended(every_error=args.verbose)
    try:
        execute_plan(plan, ended)
    except (KeyboardInterrupt, Terminated):
        if ended.job is not None and ended.job.stats.runs:  # what ended before the interrupt
            _report(args, plan, ended, interrupted=True)
        raise
    return _report(args, plan, ended)


def _report(
    args: argparse.Namespace, plan: RunPlan, ended: Ended, *, interrupted: bool = False
) -> int:
    """Print the summary (a table, or JSON with `--json`); the exit code. An
    `interrupted` run's summary is of the rollouts that ended, and says so."""
    job = ended.job
    assert job is not None
    summary = summarize(job, ended.wall, ended.templates, ended.errors)
    summary.update(
        agent=plan.agent_label,
        runtime=args.runtime,
        output=args.output,
        record=plan.record,
        interrupted=interrupted,
    )
    if args.json:
        print_json(summary)
    else:
        if interrupted:
            print(f"interrupted: the {job.stats.runs} rollout(s) that ended")
        print(render(summary), flush=True)
    return 1 if args.strict and job.stats.errors else 0
