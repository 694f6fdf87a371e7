"""A tiny Inspect AI task file: three samples, scored by `match()` and `includes()`."""

from inspect_ai import Task, task  # type: ignore[import-not-found,unused-ignore]
from inspect_ai.dataset import Sample  # type: ignore[import-not-found,unused-ignore]
from inspect_ai.scorer import includes, match  # type: ignore[import-not-found,unused-ignore]
from inspect_ai.solver import generate  # type: ignore[import-not-found,unused-ignore]

SAMPLES = [
    Sample(id="france", input="What is the capital of France?", target="Paris"),
    Sample(id="japan", input="What is the capital of Japan?", target="Tokyo"),
    Sample(id="peru", input="What is the capital of Peru?", target=["Lima", "Ciudad de los Reyes"]),
]


@task
def capitals() -> Task:
    return Task(dataset=SAMPLES, solver=generate(), scorer=match(location="any"))


@task
def capitals_loose() -> Task:
    return Task(dataset=SAMPLES, solver=generate(), scorer=[match(), includes()])
