"""The tools a run's capabilities give (by protocol family) and its task declares."""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from contextlib import AsyncExitStack
from typing import TYPE_CHECKING, Any

from ..env import ShellClient
from ._ssh import SshShell
from ._tools import SHELL_OUTPUT, Shell, Tool, command_tool, mcp_tools, shell_tool
from ._user import UserClient, user_tool

if TYPE_CHECKING:
    from ..env import Capability
    from ._run import Run

__all__ = ["family", "run_tools"]


async def run_tools(
    run: Run, stack: AsyncExitStack, *, shell_timeout: float | None = None
) -> list[Tool]:
    """Tools from `run`'s capabilities (`shell`, `ssh`, `mcp`) and its task's declarations.

    Capabilities match by protocol family (`mcp/2025-11-25` is `mcp`, `ssh/2` is `ssh`).
    Shell tools use the per-episode `cwd` the task published for their capability and
    end a command after `shell_timeout` seconds (a `shell` server kills it; an SSH
    shell closes its channel). MCP tools keep their names when there is one MCP
    capability, else get `<capability>__` in front.

    Raises:
        ValueError: a declared tool is malformed or names no shell capability, or an
            MCP capability speaks a transport other than streamable HTTP.
        ImportError: an MCP capability but no `mcp` extra, or an SSH one but no `ssh`.
    """
    manifest = run.client.manifest if run.client is not None else None
    caps = [run.binding(b.name) for b in (manifest.bindings if manifest else ())]
    shells: dict[str, Shell] = {}
    for cap in caps:
        if family(cap.protocol) == "shell":
            shells[cap.name] = _shell_client(cap, shell_timeout)
        elif family(cap.protocol) == "ssh":
            ssh = SshShell(cap, timeout=shell_timeout, max_output=SHELL_OUTPUT)
            stack.push_async_callback(ssh.aclose)
            shells[cap.name] = ssh
    mcps = [c for c in caps if family(c.protocol) == "mcp"]
    tools = [shell_tool(client, name=name) for name, client in shells.items()]
    tools += _user_tools(run, caps)
    for cap in mcps:
        prefix = f"{cap.name}__" if len(mcps) > 1 else ""
        tools += await mcp_tools(cap.url, stack, prefix=prefix, headers=_mcp_headers(cap))
    for declaration in _declared(run.start_result.get("tools")):
        where = str(declaration.get("capability", "shell"))
        if where not in shells:
            raise ValueError(f"declared tool {declaration.get('name')!r}: no shell {where!r}")
        tools.append(command_tool(declaration, shells[where]))
    return tools


def _user_tools(run: Run, caps: Sequence[Capability]) -> list[Tool]:
    """`talk_to_user` (`talk_to_<name>` for a user not called `user`) per user capability
    the task opened a dialogue on."""
    users = [c for c in caps if family(c.protocol) == "user" and "dialogue" in c.params]
    return [user_tool(UserClient(c, trace=run.trace), name=f"talk_to_{c.name}") for c in users]


def family(protocol: str) -> str:
    """A capability protocol's family: `mcp/2025-11-25` -> `mcp`, `shell` -> `shell`."""
    return protocol.partition("/")[0].strip().lower()


def _mcp_headers(cap: Capability) -> dict[str, str]:
    """HTTP headers for an MCP capability (HUD's `auth_token` as a bearer token).

    Raises:
        ValueError: the capability asks for a transport other than streamable HTTP.
    """
    transport = cap.params.get("transport", "streamable-http")
    if transport != "streamable-http" or cap.url.partition("://")[0] in ("ws", "wss"):
        raise ValueError(
            f"MCP capability {cap.name!r}: transport {transport!r} at {cap.url!r} is not "
            "supported (streamable HTTP only)"
        )
    token = cap.params.get("auth_token")
    return {"Authorization": f"Bearer {token}"} if token else {}


def _shell_client(cap: Capability, timeout: float | None) -> ShellClient:
    cwd = cap.params.get("cwd")
    return ShellClient(
        cap.url, cwd=str(cwd) if cwd is not None else None, timeout=timeout, max_output=SHELL_OUTPUT
    )


def _declared(value: Any) -> Iterable[dict[str, Any]]:
    if value is None:
        return ()
    if not isinstance(value, list) or not all(isinstance(d, dict) for d in value):
        raise ValueError(f"a task's `tools` is a list of objects, not {value!r:.80}")
    return value
