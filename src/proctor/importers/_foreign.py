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
import logging
import os
import shutil
import subprocess
import sys
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from .._environ import allowed_environ
from ..records import Task
from ..runtimes import TOKEN_ENV
from ._shared_child import SharedChildRuntime
from ._source import Source

if TYPE_CHECKING:
    from ..env import Environment

__all__ = ["Foreign", "child_main"]

log = logging.getLogger("proctor.importers")
_WARNING = "proctor warning: "  # a child's stderr line the driver logs as a warning


@dataclass(frozen=True)
class Foreign:
    """One framework served from its own interpreter.

    Attributes:
        kind: the source kind and the extra (`proctor[<kind>]`).
        package: the framework's top-level module (`verifiers`, `inspect_ai`).
        venv: the venv looked for in the project (`.venv-<kind>`).
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
            f"install one: `python -m venv {self.venv} && {self.venv}/bin/pip install "
            f"'proctor[{self.kind}]'` in your project (in a proctor checkout: `make "
            f"{self.venv}/.installed`), or set {self.python_env} to an interpreter that has it"
        )

    def python(self, python: str | None = None, near: str | os.PathLike[str] = ".") -> str:
        """The interpreter, looked for in this order: `python`, `$PROCTOR_<KIND>_PYTHON`,
        `.venv-<kind>/bin/python` in the project holding `near` (the task source), in
        the project holding the working directory and in proctor's own checkout, then
        the first `python3` / `python` on `PATH` that imports the framework and proctor.

        Raises:
            ImportError: none of them (one line: where it looked, how to install one).
        """
        chosen = python or os.environ.get(self.python_env)
        if chosen:
            return chosen
        roots = _projects([Path(near), Path.cwd(), *_checkout()])
        for root in roots:
            local = root / self.venv / "bin" / "python"
            if local.is_file():
                return str(local)
        found = [shutil.which(name) for name in ("python3", "python")]
        for candidate in dict.fromkeys(c for c in found if c):
            if _imports(candidate, (self.package, "proctor")):
                return candidate
        places = ", ".join(str(root / self.venv) for root in roots)
        raise ImportError(
            f"no interpreter with {self.package} and proctor for this {self.kind} source "
            f"(looked at ${self.python_env}, {places} and python3 on PATH); " + self.install_hint()
        )

    def source(self, target: str, argv: Sequence[str] = (), python: str | None = None) -> Source:
        """The rows of `target` read in the framework's interpreter, and a runtime
        serving them there (one child for every rollout; `async with` stops it).

        Raises:
            ImportError: no interpreter with the framework (the message says how to
                install one).
            ValueError: the target cannot be loaded there (its error is in the message).
        """
        interpreter = self.python(python, near=target)
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
        for line in done.stderr.splitlines():
            if line.startswith(_WARNING):  # the child's warnings about the source
                log.warning("%s", line[len(_WARNING) :])
        if done.returncode != 0:
            last = (done.stderr.strip().splitlines() or ["?"])[-1]
            if any(f"No module named '{m}" in last for m in (self.package, "proctor")):
                raise ImportError(f"{python}: {last}; {self.install_hint()}")
            raise ValueError(f"{argv[0]}: cannot load the {self.kind} source: {last}")
        return [Task.model_validate_json(line) for line in done.stdout.splitlines() if line]


def _projects(places: list[Path]) -> list[Path]:
    """The project folder holding each place (the nearest with a `pyproject.toml` or
    `.git`, else the place itself), each once."""
    roots: dict[Path, None] = {}
    for place in places:
        start = place.resolve()
        start = start if start.is_dir() else start.parent
        marked = (p for p in (start, *start.parents) if _is_project(p))
        roots[next(marked, start)] = None
    return list(roots)


def _checkout() -> list[Path]:
    """proctor's own source checkout (`src/proctor` in it), when it runs from one."""
    root = Path(__file__).resolve().parents[3]
    return (
        [root]
        if (root / "pyproject.toml").is_file() and root / "src" in Path(__file__).resolve().parents
        else []
    )


def _is_project(folder: Path) -> bool:
    return (folder / "pyproject.toml").is_file() or (folder / ".git").exists()


def _imports(python: str, modules: Sequence[str]) -> bool:
    """Whether `python` finds every one of `modules` (without importing them)."""
    check = "import importlib.util as u, sys; sys.exit(not all(map(u.find_spec, sys.argv[1:])))"
    try:
        done = subprocess.run(
            [python, "-c", check, *modules], capture_output=True, timeout=60, check=False
        )
    except (OSError, subprocess.TimeoutExpired):
        return False
    return done.returncode == 0


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
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(logging.Formatter(_WARNING + "%(message)s"))
    logging.getLogger("proctor").addHandler(handler)  # relayed by the driver
    if args.command == "rows":
        try:
            found = rows(args.target, options)
        except ValueError as exc:  # the target's own fault: one line, no traceback
            print(f"{type(exc).__name__}: {exc}", file=sys.stderr)
            return 1
        for row in found:
            sys.stdout.write(row.model_dump_json(exclude_defaults=True) + "\n")
        return 0
    from ..serve import serve

    token = os.environ.pop(TOKEN_ENV, None)
    asyncio.run(serve(environment(args.target, options), token=token))
    return 0
