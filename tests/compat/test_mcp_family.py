"""`ToolAgent` matches HUD's versioned MCP label (`mcp/2025-11-25`) and sends its
`auth_token`; a transport it does not speak fails the run with a clear error."""

from __future__ import annotations

import dataclasses
from collections.abc import AsyncGenerator
from typing import Any

from mcp.server.mcpserver import Context, MCPServer

from proctor import LocalRuntime, Task, rollout
from proctor.agents import ToolAgent
from proctor.compat.hud.environment import Environment
from proctor.testing import FakeModelServer, Reply

TOKEN = "not-a-real-token"
ASK = Task(env="mcp-env", id="ask")


def make_env(params: dict[str, Any]) -> Environment:
    """An MCP server published as HUD labels it, with `params`."""
    env = Environment("mcp-env")
    server = MCPServer("auth", log_level="WARNING")

    @server.tool()
    def bearer(ctx: Context) -> str:
        """The Authorization header this call came with."""
        return (ctx.headers or {}).get("authorization", "none")

    env.add_mcp(server, name="tools")

    @env.initialize
    async def relabel() -> None:
        cap = env.capability("tools")
        env.add_capability(dataclasses.replace(cap, protocol="mcp/2025-11-25", params=params))

    @env.template
    async def ask() -> AsyncGenerator[Any, Any]:
        answer = yield "Call bearer."
        yield 1.0 if answer == "ok" else 0.0

    return env


async def test_the_token_goes_as_a_bearer_header() -> None:
    env = make_env({"transport": "streamable-http", "auth_token": TOKEN})
    script = [Reply.tool("bearer"), Reply(text="ok")]
    async with FakeModelServer(script) as fake, LocalRuntime(env) as runtime:
        run = await rollout(ASK, ToolAgent(f"fake/m@{fake.url}"), runtime=runtime)
    assert run.error is None, run.error
    [result] = [s for s in run.trace.steps if s.kind == "tool_result"]
    assert result.content == f"Bearer {TOKEN}"
    assert run.reward == 1.0


async def test_a_websocket_transport_is_refused_by_name() -> None:
    env = make_env({"transport": "websocket"})
    async with FakeModelServer([Reply(text="ok")]) as fake, LocalRuntime(env) as runtime:
        run = await rollout(ASK, ToolAgent(f"fake/m@{fake.url}"), runtime=runtime)
    assert run.error is not None
    assert run.error.phase == "agent"
    assert "transport 'websocket'" in run.error.message
