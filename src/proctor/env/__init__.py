"""Authoring: environments, task templates, capabilities, graders."""

from . import _graders as graders
from ._environment import Environment
from ._runner import TaskRunner
from ._template import Template
from ._types import Answer, Capability, EvaluationResult, SubScore

__all__ = [
    "Answer",
    "Capability",
    "Environment",
    "EvaluationResult",
    "SubScore",
    "TaskRunner",
    "Template",
    "graders",
]
