"""An environment with a shell and an MCP server, both started by its hooks.

Loaded by path in `LocalRuntime` and served by `SubprocessRuntime` in the agent tests.
"""

from __future__ import annotations

import os
import shlex
import sys
from collections.abc import AsyncGenerator
from typing import Any

from mcp.server.mcpserver import MCPServer

from proctor import Environment

COUNT = shlex.join(
    [sys.executable, "-c", "import json, sys; print(len(json.load(sys.stdin)['text'].split()))"]
)

env = Environment("tools-env")
shell = env.add_shell(timeout=10)

notes = MCPServer("notes", log_level="WARNING")


@notes.tool()
def add(a: int, b: int) -> int:
    """Add two integers."""
    return a + b


@notes.tool()
def where() -> str:
    """The process id serving this MCP server."""
    return str(os.getpid())


@notes.tool()
def refuse(reason: str) -> str:
    """Always fails."""
    raise ValueError(reason)


env.add_mcp(notes)


@env.template
async def plain() -> AsyncGenerator[Any, Any]:
    answer = yield "Use the tools."
    yield 1.0 if answer else 0.0


@env.template
async def declared(workdir: str) -> AsyncGenerator[Any, Any]:
    answer = yield {
        "prompt": "Count the words with the tool.",
        "bindings": {"shell": {"cwd": workdir}},
        "tools": [
            {
                "name": "count_words",
                "description": "Count the words of `text`.",
                "parameters": {
                    "type": "object",
                    "properties": {"text": {"type": "string"}},
                    "required": ["text"],
                },
                "command": f"{COUNT}; pwd",
            }
        ],
    }
    yield 1.0 if answer == "3" else 0.0
