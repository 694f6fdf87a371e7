"""The `coding` environment: fix a small module, graded by running its tests in the substrate.

`fix(bug)` writes a buggy module and its unit tests into a fresh folder of the
substrate and asks for the corrected module (the whole file, as the answer); its own
grade only says whether the answer was applied (it compiles). The grade of record is
its verifier's: `run_tests(bug)`, an agent-less task of the same environment that the
engine starts on the same substrate after the actor is graded. It is sent the actor's
grade as its answer, runs every test case there through the shell capability and
scores the fraction that pass (one subscore per case).

`tasks.py` pairs each `fix` row with its verifier. Run it offline with
`proctor run examples/coding/tasks.py --agent examples/coding/solver.py:solve`.
"""

from __future__ import annotations

import os
import shlex
import shutil
import sys
import tempfile
import uuid
from collections.abc import AsyncGenerator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from proctor import Environment, Grade, SubScore, Task

__all__ = ["BUGS", "Bug", "coding", "fix", "row", "run_tests"]


@dataclass(frozen=True)
class Bug:
    """A module with a bug, the edit that fixes it, and its unit tests."""

    module: str
    goal: str
    source: str
    patch: tuple[str, str]
    tests: str
    cases: tuple[str, ...]

    @property
    def reference(self) -> str:
        """The fixed module."""
        old, new = self.patch
        return self.source.replace(old, new)


BUGS = {
    "median": Bug(
        module="stats.py",
        goal="`median(numbers)` returns the median of a non-empty list of numbers",
        source=(
            "def median(numbers):\n"
            "    ordered = sorted(numbers)\n"
            "    middle = len(ordered) // 2\n"
            "    return ordered[middle]\n"
        ),
        patch=(
            "    return ordered[middle]\n",
            "    if len(ordered) % 2:\n"
            "        return ordered[middle]\n"
            "    return (ordered[middle - 1] + ordered[middle]) / 2\n",
        ),
        tests=(
            "import unittest\n\n"
            "from stats import median\n\n\n"
            "class Median(unittest.TestCase):\n"
            "    def test_odd(self):\n"
            "        self.assertEqual(median([3, 1, 2]), 2)\n\n"
            "    def test_even(self):\n"
            "        self.assertEqual(median([4, 1, 3, 2]), 2.5)\n\n"
            "    def test_one(self):\n"
            "        self.assertEqual(median([7]), 7)\n\n"
            "    def test_unsorted_even(self):\n"
            "        self.assertEqual(median([10, 0]), 5)\n"
        ),
        cases=(
            "Median.test_odd",
            "Median.test_even",
            "Median.test_one",
            "Median.test_unsorted_even",
        ),
    ),
    "slug": Bug(
        module="text.py",
        goal="`slug(title)` lower-cases a title and joins its words with single hyphens",
        source=("def slug(title):\n    return title.lower().replace(' ', '-')\n"),
        patch=("title.lower().replace(' ', '-')", "'-'.join(title.lower().split())"),
        tests=(
            "import unittest\n\n"
            "from text import slug\n\n\n"
            "class Slug(unittest.TestCase):\n"
            "    def test_words(self):\n"
            "        self.assertEqual(slug('Hello World'), 'hello-world')\n\n"
            "    def test_spaces(self):\n"
            "        self.assertEqual(slug('  Many   spaces '), 'many-spaces')\n\n"
            "    def test_one_word(self):\n"
            "        self.assertEqual(slug('Proctor'), 'proctor')\n"
        ),
        cases=("Slug.test_words", "Slug.test_spaces", "Slug.test_one_word"),
    ),
}

coding = Environment("coding")
# `python3` in the shell is the interpreter serving the environment.
shell = coding.add_shell(
    env={"PATH": f"{Path(sys.executable).parent}{os.pathsep}{os.environ.get('PATH', '')}"},
    timeout=60,
)
_root: list[Path] = []  # this substrate's workspace, made when it starts serving


@coding.initialize
def _make_root() -> None:
    _root.append(Path(tempfile.mkdtemp(prefix="coding-")))


@coding.shutdown
def _remove_root() -> None:
    while _root:
        shutil.rmtree(_root.pop(), ignore_errors=True)


def _reference(task: Any) -> str:
    """The reference answer (`proctor validate --oracle`): the fixed module."""
    return BUGS[task.bug].reference


@coding.template(solution=_reference)
async def fix(bug: str) -> AsyncGenerator[Any, Any]:
    """Fix the bug in a small module; the answer is the whole corrected file."""
    spec = BUGS[bug]
    workdir = _root[0] / f"{bug}-{uuid.uuid4().hex[:8]}"
    workdir.mkdir()
    (workdir / spec.module).write_text(spec.source)
    (workdir / f"test_{spec.module}").write_text(spec.tests)
    answer = yield {
        "prompt": (
            f"In `{spec.module}`, {spec.goal}, but it has a bug:\n\n```python\n"
            f"{spec.source}```\n\nReply with the whole corrected file, nothing else."
        ),
        "bindings": {"shell": {"cwd": str(workdir)}},
    }
    source = _unfenced(str(answer or ""))
    applied = _compiles(source, spec.module)
    if applied:
        (workdir / spec.module).write_text(source)
    yield Grade(1.0 if applied else 0.0, info={"workdir": str(workdir)}, content="applied")


@coding.template
async def run_tests(bug: str) -> AsyncGenerator[Any, Any]:
    """The verifier of `fix`: run its tests where the actor left its module."""
    spec = BUGS[bug]
    graded = yield ""  # agent-less: the engine answers with the actor's grade
    workdir = _workdir(graded)
    try:
        subscores, info = [], {}
        test_module = f"test_{spec.module.removesuffix('.py')}"
        for case in spec.cases:
            result = await shell.run(
                f"python3 -m unittest {shlex.quote(f'{test_module}.{case}')}", cwd=workdir
            )
            subscores.append(SubScore(case, 1.0 if result.ok else 0.0))
            info[case] = result.stderr[-300:]
        yield Grade(subscores=subscores, info=info)
    finally:
        shutil.rmtree(workdir, ignore_errors=True)


def row(bug: str) -> Task:
    """The `fix` row for `bug`, verified by `run_tests` on the same substrate."""
    return fix(bug=bug).model_copy(update={"verifier": run_tests(bug=bug)})


def _workdir(graded: Any) -> Path:
    """The actor's folder, from its grade; only ever one of this substrate's."""
    info = graded.get("info") if isinstance(graded, dict) else None
    path = Path(str((info or {}).get("workdir", "")))
    if not _root or path.parent != _root[0] or not path.is_dir():
        raise ValueError(f"the actor's grade names no workspace of this substrate: {path}")
    return path


def _unfenced(text: str) -> str:
    """`text` without a Markdown code fence around it."""
    lines = text.strip().splitlines()
    if len(lines) >= 2 and lines[0].startswith("```") and lines[-1].strip() == "```":
        lines = lines[1:-1]
    return "\n".join(lines) + "\n"


def _compiles(source: str, name: str) -> bool:
    try:
        compile(source, name, "exec")
    except (SyntaxError, ValueError):
        return False
    return True
