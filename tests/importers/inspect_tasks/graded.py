"""An Inspect AI task whose second scorer needs a grader model (none is configured)."""

from inspect_ai import Task, task  # type: ignore[import-not-found,unused-ignore]
from inspect_ai.dataset import Sample  # type: ignore[import-not-found,unused-ignore]
from inspect_ai.scorer import match, model_graded_qa  # type: ignore[import-not-found,unused-ignore]


@task
def graded() -> Task:
    return Task(
        dataset=[Sample(id="hi", input="Say hi.", target="hi")],
        scorer=[match(), model_graded_qa()],
    )
