"""`proctor tasks diff A B` and `proctor tasks sync A B [--apply]`: task files by slug.

Exit codes: 0 nothing to change (or changes applied), 1 changes planned, 2 a usage or
load error (argparse's code for usage). docs/tasks-sync.md says what each side may be.
"""

from __future__ import annotations

import argparse
import sys
from typing import TYPE_CHECKING, Any

from .._usererror import print_error
from ._common import print_json

if TYPE_CHECKING:
    from ..tasks import SyncPlan

__all__ = ["add_tasks_parser", "cmd_diff", "cmd_sync"]

LOAD_ERROR = 2


def add_tasks_parser(subparsers: Any) -> argparse.ArgumentParser:
    """Add `tasks` (diff, sync) to the `proctor` command's subparsers; returns its parser."""
    tasks: argparse.ArgumentParser = subparsers.add_parser(
        "tasks",
        help="compare and sync task files by slug",
        description="Compare two task sources row by row (matched by slug, compared "
        "whole) and make a task file hold another's rows. Exit 0: nothing to change "
        "(or applied), 1: changes planned, 2: usage or load error.",
    )
    commands = tasks.add_subparsers(title="tasks commands", dest="tasks_command", required=True)
    for name, help_text, description in (
        (
            "diff",
            "list the rows to create, update and delete to make B hold A's rows",
            "A and B are task files or folders (.json, .jsonl, .py, a folder); nothing is written.",
        ),
        (
            "sync",
            "plan (and with --apply, write) B so it holds A's rows",
            "A is any task source; B a .json or .jsonl file (created if missing) or a "
            "folder with one tasks.json or tasks.jsonl. Without --apply nothing is "
            "written; with it B is replaced in one atomic rename, its row order kept.",
        ),
    ):
        cmd = commands.add_parser(name, help=help_text, description=description)
        cmd.add_argument("source", metavar="A", help="the rows wanted")
        cmd.add_argument("target", metavar="B", help="the rows there now")
        if name == "sync":
            cmd.add_argument("--apply", action="store_true", help="write B")
        cmd.add_argument("--json", action="store_true", help="print the plan as JSON")
        cmd.set_defaults(handler=cmd_diff if name == "diff" else cmd_sync)
    return tasks


def cmd_diff(args: argparse.Namespace) -> int:
    """`proctor tasks diff A B`."""
    from .._errors import TasksetError
    from ..tasks import Taskset, diff

    try:
        plan = diff(Taskset.from_file(args.source), Taskset.from_file(args.target))
    except TasksetError as exc:
        print_error(str(exc))
        return LOAD_ERROR
    _report(plan, args, applied=False)
    return 1 if plan.changed else 0


def cmd_sync(args: argparse.Namespace) -> int:
    """`proctor tasks sync A B [--apply]`."""
    from .._errors import TasksetError
    from ..tasks import sync

    try:
        plan = sync(args.source, args.target, apply=args.apply)
    except TasksetError as exc:
        print_error(str(exc))
        return LOAD_ERROR
    except OSError as exc:  # the target could not be written: nothing changed
        print_error(f"{args.target}: cannot write: {exc.strerror or exc}")
        return LOAD_ERROR
    _report(plan, args, applied=args.apply and plan.changed)
    return 1 if plan.changed and not args.apply else 0


def _report(plan: SyncPlan, args: argparse.Namespace, *, applied: bool) -> None:
    if args.json:
        print_json({"source": args.source, "target": args.target, **plan.to_dict(),
                    "applied": applied})  # fmt: skip
        return
    _print_table(plan, args.target, applied)


_ARGS_WIDTH = 60  # a row's args in the table, compact JSON cut to this many characters


def _args(args: dict[str, Any]) -> str:
    """`{"a":1,"b":"x"}`, cut with `…` past `_ARGS_WIDTH` characters (`--json` has all)."""
    import json

    text = json.dumps(args, separators=(",", ":"), ensure_ascii=False, default=str)
    return text if len(text) <= _ARGS_WIDTH else text[: _ARGS_WIDTH - 1] + "…"


def _print_table(plan: SyncPlan, target: str, applied: bool) -> None:
    from rich.console import Console
    from rich.table import Table

    # Off a terminal nothing is cut to 80 columns: a slug must survive a pipe whole.
    console = Console(highlight=False, width=None if sys.stdout.isatty() else 10_000)
    if plan.changed:
        table = Table("action", "slug", "template", "args", "fields", box=None, pad_edge=False)
        for action, task in plan.actions():
            fields = ", ".join(plan.fields.get(task.slug, ())) if action == "update" else ""
            table.add_row(action, task.slug, f"{task.env}/{task.id}", _args(task.args), fields)
        console.print(table)
    counts = plan.to_dict()["counts"]
    summary = ", ".join(f"{counts[k]} {k if k == 'unchanged' else 'to ' + k}" for k in counts)
    verdict = f"applied to {target}" if applied else ("no changes" if not plan.changed else "")
    console.print(summary + (f": {verdict}" if verdict else ""))
    sys.stdout.flush()
