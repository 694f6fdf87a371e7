"""Helpers shared by the commands: errors, sources, tokens, output, the event loop."""

from __future__ import annotations

import json
import os
import sys
from collections.abc import Coroutine, Sequence
from pathlib import Path
from typing import Any, TypeVar

from .._errors import CLIError, Terminated

__all__ = [
    "CLIError",
    "Terminated",
    "print_json",
    "read_token",
    "run_async",
    "split_source",
    "table",
]

T = TypeVar("T")


def run_async(coro: Coroutine[Any, Any, T], *, fast: bool = False) -> T:
    """`proctor._loop.run_async`, imported on the first call: building the parser (and
    `--help`) never loads asyncio."""
    from .._loop import run_async as run

    return run(coro, fast=fast)


def split_source(source: str, env_name: str | None) -> tuple[str, str | None]:
    """Split `PATH:ENV` (DESIGN section 3) into the path and the environment name.

    A source that exists as given is never split, and neither is one whose `PATH`
    part does not exist (the loader then names the missing file).

    Raises:
        CLIError: `:ENV` and `--env` name different environments.
    """
    if ":" in source and not Path(source).exists():
        path, _, name = source.rpartition(":")
        if path and name and "/" not in name and Path(path).exists():
            if env_name is not None and env_name != name:
                raise CLIError(f"{source} names environment {name!r} but --env says {env_name!r}")
            return path, name
    return source, env_name


def read_token(var: str | None) -> str | None:
    """The shared token from the environment variable `var` (None when `var` is None).

    Raises:
        CLIError: the variable is unset or empty.
    """
    if var is None:
        return None
    token = os.environ.get(var)
    if not token:
        raise CLIError(f"environment variable {var} is empty or unset")
    return token


def print_json(value: Any) -> None:
    """Print `value` as indented JSON on stdout (anything unknown goes through `str`)."""
    sys.stdout.write(json.dumps(value, indent=2, ensure_ascii=False, default=str) + "\n")
    sys.stdout.flush()


def table(headers: Sequence[str], rows: Sequence[Sequence[Any]], *, right: set[int] = set()) -> str:  # noqa: B006 - never mutated
    """Rows as aligned text columns under a header; columns in `right` align right."""
    cells = [[str(c) for c in headers], *[[str(c) for c in row] for row in rows]]
    widths = [max(len(row[i]) for row in cells) for i in range(len(headers))]
    lines = []
    for row in cells:
        parts = [
            cell.rjust(widths[i]) if i in right else cell.ljust(widths[i])
            for i, cell in enumerate(row)
        ]
        lines.append("  ".join(parts).rstrip())
    return "\n".join(lines)
