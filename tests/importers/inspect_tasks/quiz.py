"""An Inspect AI multiple-choice task: samples with choices, `multiple_choice()`, `choice()`."""

from inspect_ai import Task, task  # type: ignore[import-not-found,unused-ignore]
from inspect_ai.dataset import Sample  # type: ignore[import-not-found,unused-ignore]
from inspect_ai.scorer import choice  # type: ignore[import-not-found,unused-ignore]
from inspect_ai.solver import multiple_choice  # type: ignore[import-not-found,unused-ignore]


@task
def quiz() -> Task:
    samples = [
        Sample(id="sky", input="What colour is the sky?", choices=["Green", "Blue"], target="B"),
        Sample(id="two", input="Which are even?", choices=["2", "3", "4"], target=["A", "C"]),
    ]
    return Task(dataset=samples, solver=multiple_choice(), scorer=choice())
