"""Tools an agent can call: Python functions, a run's capabilities, a task's declarations.

A `Tool` is a `ToolSpec` (what the model sees) plus the coroutine that runs it. A run's
capabilities become tools (`run_tools`, in `_run_tools`) by protocol family (the part
before any `/`: HUD labels `mcp/2025-11-25`, `ssh/2`): `shell` gives one tool running
commands in the environment through the tunnel, `ssh` the same tool over SSH (HUD's
workspace shell; `SshShell`), `mcp` the MCP server's tools (via the `mcp` SDK client on
the routed URL; an image they return reaches the model as an image part), `user` a
`talk_to_user` tool (a simulated user, `UserClient`). A task may declare more in
its first yield:

    yield {"prompt": ..., "tools": [{"name": "run_tests", "description": "...",
           "parameters": {...JSON schema...}, "command": "python -m pytest -q",
           "capability": "shell"}]}

Such a tool runs `command` in that shell (or SSH) capability (default `shell`) with the
call's arguments as JSON on stdin.
"""

from __future__ import annotations

import inspect
from collections.abc import Awaitable, Callable, Sequence
from contextlib import AsyncExitStack
from dataclasses import dataclass
from typing import Any, Protocol, cast

import orjson

from .._urls import unix_path
from ..env import ShellResult
from ..models import IMAGE_TYPES, ImagePart, TextPart, ToolSpec, content_parts

__all__ = [
    "Tool",
    "ToolResult",
    "command_tool",
    "function_tool",
    "mcp_tools",
    "shell_tool",
]

SHELL_OUTPUT = 16 * 1024
"""Default cap, in bytes, on each output stream a shell tool shows the model."""

_MCP_PAGES = 100


@dataclass(frozen=True, slots=True)
class ToolResult:
    """What a tool call gave back: what the model reads, and whether it failed.

    `content` is text, or parts: strings, `TextPart`s and `ImagePart`s (a frame is
    best an `ImagePart.file(path)`: the history then holds its path, not its bytes),
    or part dicts in message shape.
    """

    content: str | Sequence[str | TextPart | ImagePart | dict[str, Any]]
    is_error: bool = False

    def message_content(self) -> str | list[dict[str, Any]]:
        """`content` as it goes into the tool message (parts as JSON dicts)."""
        return content_parts(self.content)


ToolFn = Callable[[dict[str, Any]], Awaitable[ToolResult | str]]


class Shell(Protocol):
    """What a shell tool runs commands through: a `ShellClient` or an `SshShell`."""

    @property
    def timeout(self) -> float | None:
        """Seconds after which the shell ends a command itself (None: never)."""

    async def run(self, command: str, *, stdin: str | None = None) -> ShellResult:
        """Run one command."""


@dataclass(frozen=True, slots=True)
class Tool:
    """A function the model may call: its `spec` and the coroutine `fn(arguments)`.

    `own_timeout` says the tool ends a call that overruns on its own, with a more
    telling result (a shell tool's server kills the command and reports its output);
    `ToolAgent` then waits a moment past its timeout for that result. Other tools are
    cut off at the timeout.
    """

    spec: ToolSpec
    fn: ToolFn
    own_timeout: bool = False

    @property
    def name(self) -> str:
        """The name the model calls it by."""
        return self.spec.name

    async def __call__(self, arguments: dict[str, Any]) -> ToolResult:
        """Run the tool; a plain string result is a success."""
        out = await self.fn(arguments)
        return out if isinstance(out, ToolResult) else ToolResult(out)


def function_tool(
    fn: Callable[..., Any], *, name: str | None = None, description: str | None = None
) -> Tool:
    """A tool from a Python function (sync or async), its schema from the signature.

    Arguments are validated and coerced by the annotations (pydantic); the docstring
    is the description. A result that is not a string is sent as JSON. Sync functions
    run on the event loop, so keep them quick.
    """
    from pydantic import TypeAdapter, ValidationError
    from pydantic_core import ArgsKwargs

    adapter: TypeAdapter[Any] = TypeAdapter(cast(Any, fn))
    schema = adapter.json_schema()
    schema.pop("additionalProperties", None)
    spec = ToolSpec(name or fn.__name__, description or inspect.getdoc(fn) or "", schema)

    async def call(arguments: dict[str, Any]) -> ToolResult | str:
        try:
            out = adapter.validate_python(ArgsKwargs((), arguments))
        except ValidationError as exc:
            return ToolResult(f"invalid arguments: {exc}", is_error=True)
        if inspect.isawaitable(out):
            out = await out
        return out if isinstance(out, ToolResult | str) else orjson.dumps(out).decode()

    return Tool(spec, call)


def text_tool(
    name: str,
    description: str,
    argument: tuple[str, str],
    act: Callable[[str], Awaitable[ToolResult]],
    *,
    own_timeout: bool = False,
) -> Tool:
    """A tool of one string argument (`argument`: its name and what it is): a call
    without a non-empty string there is refused, any other is `act(text)`."""
    key, about = argument
    spec = ToolSpec(
        name,
        description,
        {
            "type": "object",
            "properties": {key: {"type": "string", "description": about}},
            "required": [key],
        },
    )

    async def call(arguments: dict[str, Any]) -> ToolResult:
        text = arguments.get(key)
        if not isinstance(text, str) or not text.strip():
            return ToolResult(f"`{key}` must be a non-empty string", is_error=True)
        return await act(text)

    return Tool(spec, call, own_timeout=own_timeout)


def shell_tool(client: Shell, *, name: str = "shell", description: str | None = None) -> Tool:
    """A tool that runs one shell command per call through `client`."""

    async def run(command: str) -> ToolResult:
        return _shell_result(await client.run(command))

    return text_tool(
        name,
        description
        or "Run a bash command in the task's environment and get its exit code, stdout and "
        "stderr. Each call starts a fresh shell in the working directory, so `cd` and "
        "variables do not carry over between calls.",
        ("command", "The command to run."),
        run,
        own_timeout=client.timeout is not None,
    )


def command_tool(declaration: dict[str, Any], client: Shell) -> Tool:
    """A task-declared tool: run `declaration["command"]`, arguments as JSON on stdin.

    Raises:
        ValueError: the declaration has no string `name` or `command`.
    """
    name, command = declaration.get("name"), declaration.get("command")
    if not isinstance(name, str) or not isinstance(command, str):
        raise ValueError(f"a declared tool needs a string name and command: {declaration!r}")
    parameters = declaration.get("parameters") or {"type": "object", "properties": {}}
    spec = ToolSpec(name, str(declaration.get("description", "")), dict(parameters))

    async def call(arguments: dict[str, Any]) -> ToolResult:
        stdin = orjson.dumps(arguments).decode()
        return _shell_result(await client.run(command, stdin=stdin))

    return Tool(spec, call, own_timeout=client.timeout is not None)


def _shell_result(result: ShellResult) -> ToolResult:
    """A command's result as the model reads it; a killed command is an error. (A non-zero
    exit is not: it is often the answer, e.g. a failing test run.)"""
    return ToolResult(_format_shell(result), is_error=result.timed_out)


def _format_shell(result: ShellResult) -> str:
    """A command's result as text."""
    lines = [f"exit code: {result.exit_code}"]
    if result.timed_out:
        lines[0] += " (timed out; the command was killed)"
    for label, text in (("stdout", result.stdout), ("stderr", result.stderr)):
        if text:
            lines.append(f"--- {label} ---\n{text.rstrip(chr(10))}")
    return "\n".join(lines)


async def mcp_tools(
    url: str, stack: AsyncExitStack, *, prefix: str = "", headers: dict[str, str] | None = None
) -> list[Tool]:
    """The tools of the MCP server at `url` (streamable HTTP); the session lives on `stack`.

    `url` is `http(s)://...` or `http+unix://<percent-encoded socket path>/path` (sent
    as `Host: localhost`). Each tool is named `prefix + name`; `headers` go with every
    request. A result flagged `is_error` becomes an error.

    Raises:
        ImportError: the `mcp` extra is not installed.
    """
    try:
        from mcp import Client
    except ImportError as exc:
        raise ImportError("MCP tools need `pip install 'proctor[mcp]'`") from exc
    client = await stack.enter_async_context(Client(await _mcp_target(url, stack, headers)))
    listed: list[Any] = []
    cursor: str | None = None
    for _ in range(_MCP_PAGES):
        page = await client.list_tools(cursor=cursor)
        listed.extend(page.tools)
        cursor = page.next_cursor
        if cursor is None:
            break
    return [_mcp_tool(client, t, prefix) for t in listed]


async def _mcp_target(url: str, stack: AsyncExitStack, headers: dict[str, str] | None) -> Any:
    """What `mcp.Client` takes for `url`: the URL itself, or (for `http+unix://`, or
    with `headers`) a streamable HTTP transport over an HTTP client of ours."""
    path = unix_path(url)
    if path is None and not headers:
        return url
    import httpx2
    from mcp.client.streamable_http import streamable_http_client

    target = url
    transport = None
    if path is not None:
        scheme, _, rest = url.partition("://")
        tail = rest.split("/", 1)[1] if "/" in rest else ""
        target = f"{scheme.removesuffix('+unix')}://localhost/{tail}"
        transport = httpx2.AsyncHTTPTransport(uds=path)
    http = await stack.enter_async_context(
        httpx2.AsyncClient(
            transport=transport,
            headers=headers,
            timeout=httpx2.Timeout(30.0, read=300.0),  # the SDK's own defaults
        )
    )
    return streamable_http_client(target, http_client=http)


def _mcp_tool(client: Any, tool: Any, prefix: str) -> Tool:
    spec = ToolSpec(prefix + tool.name, tool.description or "", dict(tool.input_schema))

    async def call(arguments: dict[str, Any]) -> ToolResult:
        result = await client.call_tool(tool.name, arguments)
        parts = [_mcp_part(block) for block in result.content]
        if not parts and result.structured_content is not None:
            parts.append(orjson.dumps(result.structured_content).decode())
        if any(isinstance(p, dict) for p in parts):  # an image: text and image parts
            return ToolResult(parts, is_error=bool(result.is_error))
        return ToolResult("\n".join(map(str, parts)), is_error=bool(result.is_error))

    return Tool(spec, call)


def _mcp_part(block: Any) -> str | dict[str, Any]:
    """An MCP content block: an image part for an image the model APIs take, else text."""
    mime, data = getattr(block, "mime_type", None), getattr(block, "data", None)
    if getattr(block, "type", None) == "image" and mime in IMAGE_TYPES and isinstance(data, str):
        return {"type": "image", "media_type": mime, "data": data}
    return _mcp_text(block)


def _mcp_text(block: Any) -> str:
    text = getattr(block, "text", None)
    if isinstance(text, str):
        return text
    kind = getattr(block, "type", "content")
    mime = getattr(block, "mime_type", None)
    return f"[{kind}{': ' + mime if mime else ''} omitted]"
