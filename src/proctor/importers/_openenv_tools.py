"""The `reset` and `step` MCP tools of an OpenEnv environment, routed per episode.

Kept apart (and without postponed annotations) so the `mcp` SDK resolves the tools'
`Context` parameter; imported only when an OpenEnv environment is made.
"""

from typing import Any

from mcp.server.mcpserver import Context, MCPServer

from ._openenv_session import Episodes

__all__ = ["openenv_tools"]


def openenv_tools(episodes: Episodes, name: str) -> MCPServer:
    """An MCP server whose tools act on the episode named by the request's bearer token."""
    server = MCPServer(f"openenv-{name}", log_level="WARNING")

    @server.tool()
    async def reset(ctx: Context, options: dict[str, Any] | None = None) -> dict[str, Any]:
        """Start the episode over (options such as seed); returns the first observation."""
        return await episodes.find(_token(ctx)).reset(**(options or {}))

    @server.tool()
    async def step(ctx: Context, action: dict[str, Any]) -> dict[str, Any]:
        """Take one action (a JSON object); returns observation, reward and done."""
        return await episodes.find(_token(ctx)).step(action)

    return server


def _token(ctx: Context) -> str | None:
    """The bearer token of the HTTP request carrying this call (the episode's key)."""
    request = ctx.request_context.request
    headers = getattr(request, "headers", None)
    auth = str(headers.get("authorization", "")) if headers is not None else ""
    return auth.removeprefix("Bearer ").strip() or None
