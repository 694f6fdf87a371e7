"""The `math` environment: problems with exact answers, checked by math-verify.

The reward runs `verify.py` (a uv script whose inline header asks for math-verify)
inside the environment's substrate through `graders.run_uv_script`, so `\\frac{10}{12}`
counts for `\\frac{5}{6}` and `(x+1)^2` for `x^2 + 2x + 1`, while math-verify and sympy
never enter this interpreter. A metric records the answer's length; a group reward
records pass@2 over the rollouts of each row (run with `--group 2` or more).

Serve it with `proctor serve examples/math/env.py`, or run the taskset next to it with
`proctor run examples/math/tasks.py --group 4` (README.md).
"""

from __future__ import annotations

from collections.abc import AsyncGenerator
from pathlib import Path
from typing import Any

from proctor import Environment
from proctor.env import graders, group_rewards

__all__ = ["VERIFY", "answer_length", "correct", "math", "problem"]

VERIFY = Path(__file__).with_name("verify.py").read_text(encoding="utf-8")

math = Environment("math")


def reference(task: Any) -> str:
    """The reference solution: the expected answer, boxed."""
    return f"The answer is $\\boxed{{{task.expected}}}$."


@math.template(solution=reference)
async def problem(question: str, expected: str) -> AsyncGenerator[str, str]:
    """A problem whose answer is `expected` (LaTeX); graded by the rewards below."""
    yield f"{question}\n\nPut your final answer in \\boxed{{}}."


@math.reward(weight=1.0)
async def correct(task: Any, answer: str) -> float:
    """1.0 when math-verify finds the answer equal to the expected one, else 0.0.

    Raises:
        RuntimeError: the script failed (uv could not install math-verify, say): the
            evaluation failed, which is not a reward of 0.
    """
    result = await graders.run_uv_script(VERIFY, [task.expected, answer or ""])
    if result.exit_code != 0 or not result.stdout.strip():
        raise RuntimeError(f"verify.py exited {result.exit_code}: {result.stderr[-500:]}")
    return float(result.stdout.split()[-1])


@math.metric
def answer_length(answer: str) -> float:
    """How many characters the answer has (recorded, never weighed)."""
    return float(len(answer or ""))


math.group_reward(weight=0.0)(group_rewards.pass_at_k(2))
