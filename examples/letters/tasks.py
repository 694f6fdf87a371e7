"""Twelve rows over the three `letters` templates.

`proctor run examples/letters/tasks.py` loads this file: the rows come from `tasks`,
the environment from `letters`, and the default agent (`--agent builtin`) from `agent`.
The sibling imports work because the loader puts this folder on `sys.path`.
"""

from __future__ import annotations

from solver import Solver as agent

from env import count, letters, reverse, sum_numbers
from proctor import Taskset

__all__ = ["agent", "letters", "tasks"]

tasks = Taskset(
    "letters",
    [
        count(word="banana", letter="a"),
        count(word="Mississippi", letter="s"),
        count(word="strawberry", letter="r"),
        count(word="rhythm", letter="e"),
        reverse(word="proctor"),
        reverse(word="level"),
        reverse(word="Agent"),
        reverse(word="evaluation"),
        sum_numbers(numbers=[1, 2, 3]),
        sum_numbers(numbers=[10, -4, 7, 0]),
        sum_numbers(numbers=[]),
        sum_numbers(numbers=[123, 456, 789]),
    ],
)
