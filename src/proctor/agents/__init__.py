"""Agents: the contract, scripted agents, and the tool-calling model agent."""

from ._agent import Agent, FunctionAgent, ScriptedAgent, agent_from_fn
from ._tool_agent import ToolAgent
from ._tools import Tool, ToolResult, command_tool, function_tool, mcp_tools, run_tools, shell_tool

__all__ = [
    "Agent",
    "FunctionAgent",
    "ScriptedAgent",
    "Tool",
    "ToolAgent",
    "ToolResult",
    "agent_from_fn",
    "command_tool",
    "function_tool",
    "mcp_tools",
    "run_tools",
    "shell_tool",
]
