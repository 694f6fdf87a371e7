"""The `shellfix` environment: fix a bug in a small script, graded by running it.

Each task copies a buggy Python script and its input into a fresh working directory
and publishes that directory as the `shell` capability's per-episode `cwd`. The agent
works through the shell (read, edit, run). The grade runs the script inside the
environment, on the visible input and on a hidden one, against the reference fix.

Serve it with `proctor serve examples/shellfix/env.py`; run the taskset next to it
with `proctor run examples/shellfix/tasks.py`.
"""

from __future__ import annotations

import os
import shlex
import shutil
import sys
import tempfile
from collections.abc import AsyncGenerator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from proctor import Environment, Grade, SubScore

__all__ = ["BUGS", "Bug", "fix", "shellfix"]


@dataclass(frozen=True)
class Bug:
    """A script, the edit that fixes it, and the inputs it is checked on.

    `hidden_files` are written to `.check/` only when grading; `hidden_args` may name
    them there.
    """

    script: str
    goal: str
    source: str
    patch: tuple[str, str]
    args: str
    files: dict[str, str] = field(default_factory=dict)
    hidden_args: str = ""
    hidden_files: dict[str, str] = field(default_factory=dict)

    @property
    def reference(self) -> str:
        """The fixed source."""
        old, new = self.patch
        return self.source.replace(old, new)


BUGS = {
    "mean": Bug(
        script="stats.py",
        goal="print the mean of the numbers in the file it is given, to two decimals",
        source=(
            "import sys\n\n\n"
            "def mean(numbers):\n"
            "    return sum(numbers) / (len(numbers) - 1)\n\n\n"
            "numbers = [float(line) for line in open(sys.argv[1]) if line.strip()]\n"
            'print(f"{mean(numbers):.2f}")\n'
        ),
        patch=("/ (len(numbers) - 1)", "/ len(numbers)"),
        args="data.txt",
        files={"data.txt": "3\n4\n5\n8\n"},
        hidden_args=".check/numbers.txt",
        hidden_files={"numbers.txt": "10\n20\n-3.5\n"},
    ),
    "fizzbuzz": Bug(
        script="fizz.py",
        goal="print FizzBuzz from 1 to N: Fizz for multiples of 3, Buzz for multiples "
        "of 5, FizzBuzz for multiples of both, else the number",
        source=(
            "import sys\n\n"
            "for i in range(1, int(sys.argv[1]) + 1):\n"
            "    if i % 3 == 0:\n"
            '        print("Fizz")\n'
            "    elif i % 5 == 0:\n"
            '        print("Buzz")\n'
            "    elif i % 15 == 0:\n"
            '        print("FizzBuzz")\n'
            "    else:\n"
            "        print(i)\n"
        ),
        patch=(
            '    if i % 3 == 0:\n        print("Fizz")\n',
            '    if i % 15 == 0:\n        print("FizzBuzz")\n'
            '    elif i % 3 == 0:\n        print("Fizz")\n',
        ),
        args="15",
        hidden_args="45",
    ),
    "wordfreq": Bug(
        script="top.py",
        goal="print the most common word of the file it is given and its count, ignoring case",
        source=(
            "import sys\n"
            "from collections import Counter\n\n"
            "words = open(sys.argv[1]).read().split()\n"
            "word, count = Counter(words).most_common(1)[0]\n"
            "print(word, count)\n"
        ),
        patch=(".read().split()", ".read().lower().split()"),
        args="text.txt",
        files={"text.txt": "The cat saw the dog. THE END of the story\n"},
        hidden_args=".check/other.txt",
        hidden_files={"other.txt": "a B b c C c\n"},
    ),
}

shellfix = Environment("shellfix")
# `python3` in the agent's shell is the interpreter serving the environment.
shell = shellfix.add_shell(
    env={"PATH": f"{Path(sys.executable).parent}{os.pathsep}{os.environ.get('PATH', '')}"},
    timeout=30,
)


@shellfix.template
async def fix(bug: str) -> AsyncGenerator[Any, Any]:
    """Fix the bug in a small script so it prints the right output."""
    spec = BUGS[bug]
    workdir = Path(tempfile.mkdtemp(prefix=f"shellfix-{bug}-"))
    try:
        _write(workdir, {spec.script: spec.source, **spec.files})
        command = f"python3 {spec.script} {spec.args}"
        answer = yield {
            "prompt": (
                f"In your working directory, `{spec.script}` should {spec.goal}, but it "
                f"has a bug. Fix the script (it is also checked on other inputs). When "
                f"`{command}` prints the right output, reply with one line saying what "
                "you changed."
            ),
            "bindings": {"shell": {"cwd": str(workdir)}},
        }
        yield await _grade(spec, workdir, answer)
    finally:
        shutil.rmtree(workdir, ignore_errors=True)


async def _grade(spec: Bug, workdir: Path, answer: Any) -> Grade:
    """Run the agent's script and the reference on the visible and hidden inputs."""
    check = workdir / ".check"
    _write(check, {"reference.py": spec.reference, **spec.hidden_files})
    subscores, info = [], {}
    for label, args in (("visible", spec.args), ("hidden", spec.hidden_args)):
        got = await shell.run(f"python3 {shlex.quote(spec.script)} {args}", cwd=workdir)
        want = await shell.run(f"python3 .check/reference.py {args}", cwd=workdir)
        ok = got.ok and got.stdout == want.stdout
        subscores.append(SubScore(label, 1.0 if ok else 0.0))
        info[label] = {"stdout": got.stdout[-500:], "stderr": got.stderr[-500:]}
    return Grade(subscores=subscores, info=info, content=str(answer))


def _write(directory: Path, files: dict[str, str]) -> None:
    directory.mkdir(parents=True, exist_ok=True)
    for name, text in files.items():
        (directory / name).write_text(text)
