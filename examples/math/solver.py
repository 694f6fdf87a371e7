"""`solve`: a scripted agent for the `math` taskset, with answers math-verify must read.

It answers each problem in a form other than the expected one (`\\frac{10}{12}` for
`\\frac{5}{6}`, `(x+1)^2` for `x^2 + 2x + 1`), so the grade shows math-verify's
equivalence checking. On the hexagon it guesses, right half the time, so a group's
pass@2 varies. Use it as `--agent examples/math/solver.py:solve`; it is also the
taskset's built-in agent.
"""

from __future__ import annotations

import random
import time
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from proctor import Run

__all__ = ["ANSWERS", "solve"]

ANSWERS = {
    "What is 1/2 + 1/3?": r"$\boxed{\frac{10}{12}}$",
    "Solve for x: 2x + 3 = 11.": "Subtract 3 and halve: x = 4",
    "Simplify the square root of 8.": r"$\boxed{\sqrt{8}}$, that is $2\sqrt{2}$",
    "Expand (x + 1)^2.": r"$\boxed{(x+1)^2}$ written out is $\boxed{x^2 + 2x + 1}$",
    "What is 15% of 80?": r"$0.15 \cdot 80 = \boxed{12.0}$",
}
_HEXAGON = ("$\\boxed{720}$", "$\\boxed{540}$")  # right, and a pentagon's sum


def answer(prompt: str) -> str:
    """The solver's answer to one `math` prompt (the hexagon's drawn at random)."""
    for question, reply in ANSWERS.items():
        if prompt.startswith(question):
            return reply
    return random.choice(_HEXAGON)


async def solve(run: Run) -> None:
    """Answer the run's prompt: one assistant step, the answer as the trace's content."""
    t0 = time.time()
    reply = answer(str(run.prompt))
    run.trace.add("assistant", reply, start=t0)
    run.trace.content = reply
