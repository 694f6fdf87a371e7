"""The `letters` environment: three small text tasks with exact answers.

Serve it with `proctor serve examples/letters/env.py`, or run the taskset next to it
with `proctor run examples/letters/tasks.py`.
"""

from __future__ import annotations

from collections.abc import AsyncGenerator

from proctor import Environment, graders

letters = Environment("letters")


@letters.template
async def count(word: str, letter: str) -> AsyncGenerator[str | float, str]:
    """Count how often a letter occurs in a word (case-insensitive)."""
    answer = yield (
        f"How many times does the letter '{letter}' occur in the word '{word}'? "
        "Answer with a number."
    )
    yield graders.numeric(answer, word.lower().count(letter.lower()))


@letters.template
async def reverse(word: str) -> AsyncGenerator[str | float, str]:
    """Write a word backwards."""
    answer = yield f"Write the word '{word}' backwards. Answer with the word only."
    yield graders.exact(answer, word[::-1])


@letters.template(id="sum")
async def sum_numbers(numbers: list[int]) -> AsyncGenerator[str | float, str]:
    """Add up a list of integers."""
    answer = yield (
        f"What is the sum of these numbers: {', '.join(map(str, numbers))}? Answer with a number."
    )
    yield graders.numeric(answer, sum(numbers))
