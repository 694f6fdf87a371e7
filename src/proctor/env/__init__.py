"""Authoring: environments, task templates, capabilities, graders."""

from .._public import publish
from . import _graders as graders
from ._environment import Environment
from ._runner import TaskRunner
from ._shell import ShellClient, ShellResult, ShellServer
from ._template import Template
from ._types import Answer, Capability

__all__ = [
    "Answer",
    "Capability",
    "Environment",
    "ShellClient",
    "ShellResult",
    "ShellServer",
    "TaskRunner",
    "Template",
    "graders",
]

publish(globals(), __all__, __name__)
