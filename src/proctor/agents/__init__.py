"""Agents: the contract and built-in agents."""

from ._agent import Agent, FunctionAgent, ScriptedAgent, agent_from_fn

__all__ = ["Agent", "FunctionAgent", "ScriptedAgent", "agent_from_fn"]
