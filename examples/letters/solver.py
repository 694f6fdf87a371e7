"""`solver`: a reference agent that reads each `letters` prompt and answers it exactly.

Use it as `--agent examples/letters/solver.py:solver`; it is also the taskset's
built-in agent. It records one assistant step per run and leaves the answer in
`run.trace.content`.
"""

from __future__ import annotations

import re
import time
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from proctor import Run

__all__ = ["Solver", "solve", "solver"]

_COUNT = re.compile(r"the letter '(.)' occur in the word '([^']*)'")
_REVERSE = re.compile(r"Write the word '([^']*)' backwards")
_SUM = re.compile(r"the sum of these numbers: ([-0-9, ]*)\?")


def solve(prompt: str) -> str:
    """The correct answer to one `letters` prompt.

    Raises:
        ValueError: the prompt is not one of the three `letters` tasks.
    """
    if m := _COUNT.search(prompt):
        letter, word = m.groups()
        return str(word.lower().count(letter.lower()))
    if m := _REVERSE.search(prompt):
        return m.group(1)[::-1]
    if m := _SUM.search(prompt):
        return str(sum(int(n) for n in m.group(1).split(",") if n.strip()))
    raise ValueError(f"not a letters prompt: {prompt!r}")


class Solver:
    """Solve every `letters` task by parsing its prompt."""

    async def __call__(self, run: Run) -> None:
        t0 = time.time()
        answer = solve(str(run.prompt))
        run.trace.add("assistant", answer, start=t0)
        run.trace.content = answer


solver = Solver()
