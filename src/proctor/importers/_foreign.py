"""Sources whose framework lives in another interpreter (verifiers, Inspect AI).

Their dependencies are heavy and pinned, so the driver imports none of them: a child
`python -m proctor.importers._<kind> rows|serve TARGET`, run with the interpreter that has
the framework and proctor, prints the rows (JSONL) or serves the environment
(`python -m proctor.serve` semantics: its port on stdout, the token from
`$PROCTOR_TOKEN`). `Foreign.source` runs both.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import subprocess
import sys
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from .._environ import allowed_environ
from ..records._task import Task
from ..runtimes._subprocess import TOKEN_ENV
from ._shared_child import SharedChildRuntime

if TYPE_CHECKING:
    from ..env._environment import Environment
    from ._source import Source

__all__ = ["Foreign", "child_main"]


@dataclass(frozen=True)
class Foreign:
    """One framework served from its own interpreter.

    Attributes:
        kind: the source kind and the extra (`proctor[<kind>]`).
        package: the framework's top-level module (`verifiers`, `inspect_ai`).
        venv: the venv looked for in the working directory (`.venv-<kind>`).
    """

    kind: str
    package: str

    @property
    def venv(self) -> str:
        return f".venv-{self.kind}"

    @property
    def python_env(self) -> str:
        """The variable naming the interpreter (`PROCTOR_<KIND>_PYTHON`)."""
        return f"PROCTOR_{self.kind.upper()}_PYTHON"

    @property
    def module(self) -> str:
        return f"proctor.importers._{self.kind}"

    def install_hint(self) -> str:
        return (
            f"{self.kind} sources run in an interpreter that has {self.package} and proctor: "
            f"`python -m venv {self.venv} && {self.venv}/bin/pip install 'proctor[{self.kind}]'` "
            f"(in a proctor checkout: `make {self.venv}/.installed`), then pass python= or "
            f"set {self.python_env} to its bin/python"
        )

    def python(self, python: str | None = None) -> str:
        """The interpreter: `python`, `$PROCTOR_<KIND>_PYTHON`, or `.venv-<kind>/bin/python`
        in the working directory.

        Raises:
            ImportError: none of them (the message says how to install one).
        """
        chosen = python or os.environ.get(self.python_env)
        if chosen:
            return chosen
        local = Path(self.venv, "bin", "python")
        if local.is_file():
            return str(local.absolute())
        raise ImportError(self.install_hint())

    def source(self, target: str, argv: Sequence[str] = (), python: str | None = None) -> Source:
        """The rows of `target` read in the framework's interpreter, and a runtime
        serving them there (one child for every rollout; `async with` stops it).

        Raises:
            ImportError: no interpreter with the framework (the message says how to
                install one).
            ValueError: the target cannot be loaded there (its error is in the message).
        """
        from ._source import Source

        interpreter = self.python(python)
        rows = self._rows(interpreter, [target, *argv])
        command = [interpreter, "-m", self.module, "serve", target, *argv]
        return Source(self.kind, rows, target, SharedChildRuntime(command))

    def _rows(self, python: str, argv: list[str]) -> list[Task]:
        try:
            done = subprocess.run(
                [python, "-m", self.module, "rows", *argv],
                capture_output=True,
                text=True,
                env=allowed_environ(),
                check=False,
            )
        except OSError as exc:
            raise ImportError(f"{python}: {exc}; {self.install_hint()}") from exc
        if done.returncode != 0:
            last = (done.stderr.strip().splitlines() or ["?"])[-1]
            if any(f"No module named '{m}" in last for m in (self.package, "proctor")):
                raise ImportError(f"{python}: {last}; {self.install_hint()}")
            raise ValueError(f"{argv[0]}: cannot load the {self.kind} source: {last}")
        return [Task.model_validate_json(line) for line in done.stdout.splitlines() if line]


def child_main(
    argv: list[str] | None,
    prog: str,
    rows: Callable[[str, dict[str, Any]], list[Task]],
    environment: Callable[[str, dict[str, Any]], Environment],
) -> int:
    """`rows|serve TARGET [--options JSON]`: print the rows, or serve the environment
    (token from `$PROCTOR_TOKEN`, removed once read)."""
    parser = argparse.ArgumentParser(prog=f"python -m {prog}")
    parser.add_argument("command", choices=["rows", "serve"])
    parser.add_argument("target")
    parser.add_argument("--options", default="{}", help="importer options, as JSON")
    args = parser.parse_args(argv)
    options = json.loads(args.options)
    if args.command == "rows":
        for row in rows(args.target, options):
            sys.stdout.write(row.model_dump_json(exclude_defaults=True) + "\n")
        return 0
    from ..channel._serve import serve

    token = os.environ.pop(TOKEN_ENV, None)
    asyncio.run(serve(environment(args.target, options), token=token))
    return 0
