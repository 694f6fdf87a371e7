"""`proctor batch`: plan, `--execute`, `--resume`, `report`, `reconcile`, `schema`."""

from __future__ import annotations

import argparse
import contextlib
import os
import sys
from collections.abc import Callable, Iterator
from typing import Any

from ._common import CLIError
from ._compare import add_compare_arguments, cmd_batch_compare

__all__ = ["add_batch_parser", "cmd_batch", "cmd_batch_schema"]

_WORDS = ("schema", "report", "reconcile")


def add_batch_parser(subparsers: Any) -> argparse.ArgumentParser:
    """Add `batch` to the `proctor` command's subparsers; returns its parser."""
    batch: argparse.ArgumentParser = subparsers.add_parser(
        "batch",
        help="plan, run, resume and report a batch of rollouts from a JSON or TOML config",
        description="Plan mode (the default) checks a batch config read-only, in order: "
        "it parses, the rollout count, credentials (by name), the environment and every "
        "row's args, substrates, live model catalogs, pricing, and prints the plan as one "
        "JSON document; exit 0 only if --execute would launch. --execute --output-dir NEW "
        "runs it into a new directory; --resume OUT continues one. 'proctor batch report "
        "OUT' prints the cost and reward report, 'proctor batch reconcile OUT' removes what "
        "a killed runner left running, 'proctor batch schema' prints the config schema.",
    )
    batch.add_argument(
        "config",
        metavar="CONFIG",
        nargs="?",
        help="the batch config (.json or .toml), or one of: schema, report OUT, reconcile OUT, "
        "compare A [B]",
    )
    batch.add_argument("target", metavar="OUT", nargs="?", help=argparse.SUPPRESS)
    batch.add_argument("--execute", action="store_true", help="run the batch if the plan passes")
    batch.add_argument("--output-dir", metavar="NEW_DIR", help="where --execute writes (new)")
    batch.add_argument("--resume", metavar="OUT", help="continue the batch in OUT")
    batch.add_argument(
        "--retry-errors",
        action="store_true",
        help="with --resume: new attempts for failed and interrupted rollouts",
    )
    batch.add_argument(
        "--retry",
        metavar="ID",
        nargs="+",
        default=[],
        help="with --resume: new attempts for these rollouts (ids as the report lists them)",
    )
    batch.add_argument(
        "--retry-where",
        metavar="FILTER",
        help="with --resume: new attempts for the rollouts matching FILTER: key=value terms "
        "joined by ',' or 'and' over status, task, agent, model, phase, error_phase, attempt "
        "(e.g. 'status=interrupted')",
    )
    batch.add_argument(
        "--allow-partial",
        action="store_true",
        help="accept fewer enabled rollouts than expected_rollouts",
    )
    batch.add_argument(
        "--skip-model-check",
        action="store_true",
        help="do not ask each provider's /v1/models catalog",
    )
    batch.add_argument(
        "--json", action="store_true", help="report: JSON instead of tables (plans are JSON)"
    )
    batch.add_argument("--quiet", action="store_true", help="no live view on stderr")
    batch.add_argument(
        "--durability",
        choices=("default", "strict"),
        help="strict: fsync every state change; default: group commits within 0.2 s "
        "(overrides the config's)",
    )
    add_compare_arguments(batch)
    batch.set_defaults(handler=_dispatch)
    return batch


def _dispatch(args: argparse.Namespace) -> int:
    # `schema`, `report` and `reconcile` are words, not files: argparse cannot tell
    # them apart as subcommands of a command that also takes a path.
    if args.config == "compare":
        return cmd_batch_compare(args)
    if args.other:
        raise CLIError(f"unexpected argument {args.other!r}")
    if args.config == "schema":
        return cmd_batch_schema(args)
    if args.config in ("report", "reconcile"):
        if not args.target:
            raise CLIError(f"proctor batch {args.config} OUT: name the output directory")
        return cmd_batch_report(args) if args.config == "report" else cmd_batch_reconcile(args)
    if args.target:
        raise CLIError(f"unexpected argument {args.target!r}")
    if args.resume:
        return cmd_batch_resume(args)
    if args.retry or args.retry_where is not None or args.retry_errors:
        raise CLIError("--retry, --retry-where and --retry-errors go with --resume OUT")
    if args.config is None:
        raise CLIError("proctor batch: name a CONFIG (or --resume OUT)")
    if args.execute:
        return cmd_batch_execute(args)
    if args.output_dir:
        raise CLIError("--output-dir goes with --execute")
    return cmd_batch(args)


def cmd_batch(args: argparse.Namespace) -> int:
    """Print the plan of `args.config` as JSON; 0 if `--execute` would launch, else 1."""
    import asyncio

    from ..batch import aplan
    from ._common import run_async

    try:
        plan = run_async(
            aplan(
                args.config,
                allow_partial=args.allow_partial,
                skip_model_check=args.skip_model_check,
            )
        )
    except asyncio.CancelledError:  # Ctrl-C, whatever else cancelled the plan meanwhile
        raise KeyboardInterrupt from None
    sys.stdout.write(plan.to_json() + "\n")
    sys.stdout.flush()
    if not plan.ok:
        _say_not_ok(plan)
    return 0 if plan.ok else 1


_REASON_LINES = 20  # per failed check on stderr; the JSON on stdout has them all


def _say_not_ok(plan: Any) -> None:
    """`plan: not ok (failed; not run: ...)` and each failure's reasons, on stderr."""
    failed = [c for c in plan.checks if not c.ok and not c.skipped]
    skipped = [c.name for c in plan.checks if c.skipped]
    names = ", ".join(c.name for c in failed)
    if skipped:
        names += f"; not run: {', '.join(skipped)}"
    lines = [f"plan: not ok ({names})"]
    for check in failed:
        reasons = check.reason.splitlines() or [""]
        lines += [f"{check.name}: {line}" for line in reasons[:_REASON_LINES]]
        if len(reasons) > _REASON_LINES:
            lines.append(f"{check.name}: ... {len(reasons) - _REASON_LINES} more in the plan")
    print("\n".join(lines), file=sys.stderr)


def cmd_batch_execute(args: argparse.Namespace) -> int:
    """Plan, and run into a new `--output-dir` only if every check passes."""
    from ..batch import execute

    if not args.output_dir:
        raise CLIError("--execute needs --output-dir NEW_DIR (a directory that does not exist)")
    return _finish(
        lambda: execute(
            args.config,
            args.output_dir,
            allow_partial=args.allow_partial,
            skip_model_check=args.skip_model_check,
            view=None if args.quiet else sys.stderr,
            durability=args.durability,
        )
    )


def cmd_batch_resume(args: argparse.Namespace) -> int:
    """Continue the batch in `--resume OUT`."""
    from ..batch import resume

    if args.config is not None or args.execute or args.output_dir:
        raise CLIError("--resume OUT takes no CONFIG, --execute or --output-dir")
    try:
        return _finish(
            lambda: resume(
                args.resume,
                retry_errors=args.retry_errors,
                retry=args.retry,
                retry_where=args.retry_where,
                view=None if args.quiet else sys.stderr,
                durability=args.durability,
            )
        )
    except ValueError as exc:  # a bad filter, refused before anything is opened
        if not str(exc).startswith("--retry-where:"):
            raise
        raise CLIError(str(exc)) from None


def _finish(run: Callable[[], Any]) -> int:
    """Run the batch with stdout kept for its result, and print the result: always one
    `proctor.batch.result/1` document, also when the runner could not start or write."""
    from .._errors import BatchConfigError, StoreError
    from ..batch import BatchResult

    with _stdout_kept():
        try:
            result = run()
        except (StoreError, BatchConfigError, OSError) as exc:
            error = f"{type(exc).__name__}: {exc}"
            result = BatchResult(launched=False, output_dir=None, stopped="error", error=error)
    sys.stdout.write(result.to_json() + "\n")
    sys.stdout.flush()
    if result.error:
        print(f"error: the runner stopped: {result.error}", file=sys.stderr)
    if result.stopped == "interrupted" and not result.launched:
        print(
            "error: interrupted" if result.signal != "SIGTERM" else "error: terminated",
            file=sys.stderr,
        )
    elif not result.launched and result.plan is not None:
        _say_not_ok(result.plan)
    elif result.output_dir:
        print(f"batch output: {result.output_dir}", file=sys.stderr)
        _say_left(result)
    return int(result.exit_code)


def _say_left(result: Any) -> None:
    """What a run left unfinished, by status, and the command that runs it."""
    import shlex

    left = {s: n for s, n in sorted(result.counts.items()) if s != "completed" and n}
    if not left or not result.launched:
        return
    what = ", ".join(f"{n} {s}" for s, n in left.items())
    command = f"proctor batch --resume {shlex.quote(result.output_dir)}"
    ended = set(left) - {"queued", "running"}
    if ended == {"interrupted"}:
        command += " --retry-where 'status=interrupted'"
    elif ended:
        command += " --retry-errors"
    print(f"left: {what}; to run them: {command}", file=sys.stderr)


@contextlib.contextmanager
def _stdout_kept() -> Iterator[None]:
    """Point file descriptor 1 at stderr while the block runs, so whatever the batch's
    code writes to it (a print, a child process, a C library) never mixes with the
    result document printed after."""
    sys.stdout.flush()
    try:
        saved = os.dup(1)
    except OSError:  # no stdout at all
        yield
        return
    os.dup2(2, 1)
    try:
        yield
    finally:
        sys.stdout.flush()
        os.dup2(saved, 1)
        os.close(saved)


def cmd_batch_report(args: argparse.Namespace) -> int:
    """Print the cost and reward report of an output directory."""
    from ..batch import render_report, report
    from ._common import print_json

    doc = report(args.target, rollouts=args.json, threshold=args.threshold, compare=args.compare)
    if args.json:
        print_json(doc)
    else:
        text = render_report(doc)
        sys.stdout.write(text if text.endswith("\n") else text + "\n")
    return 0


def cmd_batch_reconcile(args: argparse.Namespace) -> int:
    """Remove what a killed runner left labelled for its batch; print what went.

    The report is also recorded as a `reconciled` event, unless a runner holds the
    directory (then it is only printed). Exit 1 if anything could not be removed.
    """
    from .._errors import StoreError
    from ..batch import reconcile_sync
    from ..store import BatchStore
    from ._common import print_json

    report = reconcile_sync(args.target)
    try:
        with BatchStore.open(args.target) as store:
            store.event("reconciled", removed=report["removed"], errors=report["errors"])
    except StoreError as exc:
        print(f"note: not recorded in {args.target}: {exc}", file=sys.stderr)
    print_json(report)
    return 1 if report["errors"] else 0


def cmd_batch_schema(args: argparse.Namespace) -> int:
    """Print the JSON schema of a batch config."""
    from ..batch import BatchConfig
    from ._common import print_json

    print_json(BatchConfig.model_json_schema())
    return 0
