"""`proctor batch compare A [B]`: two agents paired over their tasks, with statistics.

Also the options `proctor batch report` takes for its agent sections (`--threshold`,
`--compare`).
"""

from __future__ import annotations

import argparse
import sys

from ._common import CLIError

__all__ = ["add_compare_arguments", "cmd_batch_compare"]


def add_compare_arguments(batch: argparse.ArgumentParser) -> None:
    """Add `compare`'s second directory and the comparison options to `batch`."""
    batch.add_argument("other", metavar="B", nargs="?", help=argparse.SUPPRESS)
    batch.add_argument(
        "--threshold",
        type=float,
        default=1.0,
        help="report, compare: a rollout passes when its reward is at least this (1.0)",
    )
    batch.add_argument(
        "--compare",
        nargs=2,
        metavar=("AGENT_A", "AGENT_B"),
        help="report: compare these two agents (automatic when the batch has exactly two)",
    )
    batch.add_argument(
        "--agents",
        nargs=2,
        metavar=("AGENT_A", "AGENT_B"),
        help="compare OUT: the two agents of one batch to compare",
    )
    batch.add_argument("--agent-a", metavar="NAME", help="compare A B: the agent of A")
    batch.add_argument("--agent-b", metavar="NAME", help="compare A B: the agent of B")


def cmd_batch_compare(args: argparse.Namespace) -> int:
    """Print the paired comparison of two agents (text, or JSON with `--json`); exit 0."""
    from ..batch import compare, render_comparison
    from ._common import print_json

    if not args.target:
        raise CLIError("proctor batch compare A [B]: name one or two output directories")
    agent_a, agent_b = args.agent_a, args.agent_b
    if args.agents:
        if args.other or agent_a or agent_b:
            raise CLIError("--agents A B compares two agents of one batch: one OUT, no --agent-a/b")
        agent_a, agent_b = args.agents
    doc = compare(
        args.target, args.other, agent_a=agent_a, agent_b=agent_b, threshold=args.threshold
    )
    if args.json:
        print_json(doc)
    else:
        sys.stdout.write(render_comparison(doc))
    return 0
