"""Agents: the contract (`Agent`, and the `Run` it acts on), scripted agents, the
tool-calling model agent, and harnesses in any language run as child processes."""

from .._public import publish
from ._agent import Agent, FunctionAgent, ScriptedAgent, agent_from_fn
from ._command import CommandAgent
from ._computer_agent import ComputerAgent, ComputerStats
from ._run import JudgeEndpoint, Run, RunStatus
from ._run_tools import run_tools
from ._tool_agent import ToolAgent
from ._tools import Tool, ToolResult, command_tool, function_tool, mcp_tools, shell_tool
from ._user import UserClient, user_tool

__all__ = [
    "Agent",
    "CommandAgent",
    "ComputerAgent",
    "ComputerStats",
    "FunctionAgent",
    "JudgeEndpoint",
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

publish(globals(), __all__, __name__)
