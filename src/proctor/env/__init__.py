"""Authoring: environments, task templates, capabilities, rewards, graders."""

from .._public import publish
from . import _graders as graders
from . import _group_rewards as group_rewards
from ._browser import BrowserServer
from ._computer_actions import validate_actions
from ._computer_client import DesktopClient, Frame
from ._desktop import DesktopServer
from ._environment import Environment, registered
from ._judge import Judge
from ._rewards import GradeContext, GroupMember, GroupReward, TaskView, evaluate_group
from ._runner import TaskRunner
from ._shell import ShellResult, ShellServer
from ._shell_client import ShellClient
from ._template import Template
from ._types import Answer, Capability
from ._user import Dialogue, Message, ModelUser, UserFn, UserServer, scripted
from ._workspace_diff import WorkspaceDiff, WorkspaceEntry

__all__ = [
    "Answer",
    "BrowserServer",
    "Capability",
    "DesktopClient",
    "DesktopServer",
    "Dialogue",
    "Environment",
    "Frame",
    "GradeContext",
    "GroupMember",
    "GroupReward",
    "Judge",
    "Message",
    "ModelUser",
    "ShellClient",
    "ShellResult",
    "ShellServer",
    "TaskRunner",
    "TaskView",
    "Template",
    "UserFn",
    "UserServer",
    "WorkspaceDiff",
    "WorkspaceEntry",
    "evaluate_group",
    "graders",
    "group_rewards",
    "registered",
    "scripted",
    "validate_actions",
]

publish(
    globals(),
    __all__,
    __name__,
    deprecated={
        "EvaluationResult": "proctor.records.Grade",
        "SubScore": "proctor.records.SubScore",
    },
)
