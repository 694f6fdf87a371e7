"""Six rows over the `math` environment's one template.

`proctor run examples/math/tasks.py --group 4` loads this file: the rows come from
`tasks`, the environment from `math`, the default agent from `agent` (the solver).
"""

from __future__ import annotations

from solver import solve as agent

from env import math, problem
from proctor import Taskset

__all__ = ["agent", "math", "tasks"]

tasks = Taskset(
    "math",
    [
        problem(question="What is 1/2 + 1/3? Give the exact value.", expected=r"\frac{5}{6}"),
        problem(question="Solve for x: 2x + 3 = 11.", expected="4"),
        problem(question="Simplify the square root of 8.", expected=r"2\sqrt{2}"),
        problem(question="Expand (x + 1)^2.", expected="x^2 + 2x + 1"),
        problem(question="What is 15% of 80?", expected="12"),
        problem(
            question="What is the sum of the interior angles of a hexagon, in degrees?",
            expected="720",
        ),
    ],
)
