"""Authoring: environments, task templates, capabilities, rewards, graders."""

from __future__ import annotations

from .._public import lazy_exports

TYPE_CHECKING = False  # typing's constant, without importing typing (mypy reads it so)

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
_EXPORTS = {
    "Answer": "._types",
    "BrowserServer": "._browser",
    "Capability": "._types",
    "DesktopClient": "._computer_client",
    "DesktopServer": "._desktop",
    "Dialogue": "._user",
    "Environment": "._environment",
    "Frame": "._computer_client",
    "GradeContext": "._rewards",
    "GroupMember": "._rewards",
    "GroupReward": "._rewards",
    "Judge": "._judge",
    "Message": "._user",
    "ModelUser": "._user",
    "ShellClient": "._shell_client",
    "ShellResult": "._shell",
    "ShellServer": "._shell",
    "TaskRunner": "._runner",
    "TaskView": "._rewards",
    "Template": "._template",
    "UserFn": "._user",
    "UserServer": "._user",
    "WorkspaceDiff": "._workspace_diff",
    "WorkspaceEntry": "._workspace_diff",
    "evaluate_group": "._rewards",
    "graders": "._graders",
    "group_rewards": "._group_rewards",
    "registered": "._environment",
    "scripted": "._user",
    "validate_actions": "._computer_actions",
}

if TYPE_CHECKING:
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
else:
    __getattr__, __dir__ = lazy_exports(
        __name__,
        _EXPORTS,
        deprecated={
            "EvaluationResult": "proctor.records.Grade",
            "SubScore": "proctor.records.SubScore",
        },
    )
