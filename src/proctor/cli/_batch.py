"""`proctor batch CONFIG` (plan mode) and `proctor batch schema`."""

from __future__ import annotations

import argparse
import sys
from typing import Any

__all__ = ["add_batch_parser", "cmd_batch", "cmd_batch_schema"]


def add_batch_parser(subparsers: Any) -> argparse.ArgumentParser:
    """Add `batch` to the `proctor` command's subparsers; returns its parser."""
    batch: argparse.ArgumentParser = subparsers.add_parser(
        "batch",
        help="plan a batch of rollouts from a JSON or TOML config",
        description="Check a batch config read-only, in order: it parses, the rollout "
        "count, credentials (by name), the environment and every row's args, "
        "substrates, live model catalogs, pricing. Prints the plan as one JSON "
        "document on stdout; exits 0 only if every check passed. "
        "'proctor batch schema' prints the config's JSON schema.",
    )
    batch.add_argument("config", metavar="CONFIG", help="the batch config (.json or .toml)")
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
        "--json",
        action="store_true",
        help="accepted for symmetry with other commands: the plan is always JSON",
    )
    batch.set_defaults(handler=_dispatch)
    return batch


def _dispatch(args: argparse.Namespace) -> int:
    # `schema` is a word, not a file: argparse cannot tell them apart as subcommands
    # of a command that also takes a path, so the choice is made here.
    if args.config == "schema":
        return cmd_batch_schema(args)
    return cmd_batch(args)


def cmd_batch(args: argparse.Namespace) -> int:
    """Print the plan of `args.config` as JSON; 0 if `--execute` would launch, else 1."""
    from ..batch._plan import aplan
    from ._common import run_async

    plan = run_async(
        aplan(args.config, allow_partial=args.allow_partial, skip_model_check=args.skip_model_check)
    )
    sys.stdout.write(plan.to_json() + "\n")
    sys.stdout.flush()
    if not plan.ok:
        failed = [c.name for c in plan.checks if not c.ok]
        print(f"plan: not ok ({', '.join(failed)})", file=sys.stderr)
    return 0 if plan.ok else 1


def cmd_batch_schema(args: argparse.Namespace) -> int:
    """Print the JSON schema of a batch config."""
    from ..batch._config import BatchConfig
    from ._common import print_json

    print_json(BatchConfig.model_json_schema())
    return 0
