"""Agents: the contract (`Agent`, and the `Run` it acts on), scripted agents, the
tool-calling model agent, and harnesses in any language run as child processes."""

from __future__ import annotations

from .._public import lazy_exports

TYPE_CHECKING = False  # typing's constant, without importing typing (mypy reads it so)

__all__ = [
    "Agent",
    "CommandAgent",
    "ComputerAgent",
    "ComputerStats",
    "FunctionAgent",
    "JudgeEndpoint",
    "Needs",
    "Run",
    "RunStatus",
    "ScriptedAgent",
    "Tool",
    "ToolAgent",
    "ToolResult",
    "UserClient",
    "agent_from_fn",
    "command_tool",
    "function_tool",
    "mcp_tools",
    "run_tools",
    "shell_tool",
    "user_tool",
]
_EXPORTS = {
    "Agent": "._agent",
    "CommandAgent": "._command",
    "ComputerAgent": "._computer_agent",
    "ComputerStats": "._computer_agent",
    "FunctionAgent": "._agent",
    "JudgeEndpoint": "._run",
    "Needs": "._placement_needs",
    "Run": "._run",
    "RunStatus": "._run",
    "ScriptedAgent": "._agent",
    "Tool": "._tools",
    "ToolAgent": "._tool_agent",
    "ToolResult": "._tools",
    "UserClient": "._user",
    "agent_from_fn": "._agent",
    "command_tool": "._tools",
    "function_tool": "._tools",
    "mcp_tools": "._tools",
    "run_tools": "._run_tools",
    "shell_tool": "._tools",
    "user_tool": "._user",
}

if TYPE_CHECKING:
    from ._agent import Agent, FunctionAgent, ScriptedAgent, agent_from_fn
    from ._command import CommandAgent
    from ._computer_agent import ComputerAgent, ComputerStats
    from ._placement_needs import Needs
    from ._run import JudgeEndpoint, Run, RunStatus
    from ._run_tools import run_tools
    from ._tool_agent import ToolAgent
    from ._tools import Tool, ToolResult, command_tool, function_tool, mcp_tools, shell_tool
    from ._user import UserClient, user_tool
else:
    __getattr__, __dir__ = lazy_exports(__name__, _EXPORTS)
