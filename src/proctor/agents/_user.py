"""`UserClient`: the agent's side of a simulated user (user/1, see `proctor.env.UserServer`),
and `user_tool`, the `talk_to_user` tool `ToolAgent` gets when the run has a user."""

from __future__ import annotations

import asyncio
from typing import TYPE_CHECKING, Any

import orjson

from .._errors import ConnectionLost, ProtocolError, RemoteError
from .._urls import host_port, unix_path
from ._tools import Tool, ToolResult, text_tool

if TYPE_CHECKING:
    from ..env import Capability
    from ..records import Trace

__all__ = ["UserClient", "user_tool"]

MAX_LINE = 1024 * 1024


class UserClient:
    """Talk to the simulated user of `binding` (`run.binding("user")`).

    With a `trace`, each exchange lands on it as typed steps: the agent's message as an
    `assistant` step and the user's reply as a `user` step, both with
    `data["dialogue"] = True` (the dashboard shows them as a conversation).

    Raises:
        ValueError: the binding has no per-episode `dialogue` (the task opened none) or
            its URL names neither a socket path nor a host:port.
    """

    def __init__(self, binding: Capability, *, trace: Trace | None = None) -> None:
        dialogue = binding.params.get("dialogue")
        if not isinstance(dialogue, str):
            raise ValueError(
                f"capability {binding.name!r} has no dialogue for this episode: the task "
                "must publish `dialogue.binding` in its prompt's bindings"
            )
        self._path = unix_path(binding.url)
        self._address = host_port(binding.url) if self._path is None else None
        self.name = binding.name
        self._dialogue = dialogue
        self._trace = trace
        self.done = False

    def __repr__(self) -> str:
        return f"UserClient({self.name!r}{', done' if self.done else ''})"

    async def send(self, text: str) -> str | None:
        """Say `text` to the user; returns the reply, or None once the user ended the
        dialogue (`done` is then set).

        Raises:
            OSError: the capability could not be reached.
            ConnectionLost: the connection closed before the reply.
            RemoteError: the server refused (unknown dialogue) or the user failed.
            ProtocolError: the reply is malformed.
        """
        if self._trace is not None:
            self._trace.add("assistant", text, dialogue=True, to=self.name)
        if self._address is not None:
            reader, writer = await asyncio.open_connection(*self._address, limit=MAX_LINE)
        else:
            reader, writer = await asyncio.open_unix_connection(self._path, limit=MAX_LINE)
        try:
            writer.write(orjson.dumps({"dialogue": self._dialogue, "text": text}) + b"\n")
            line = await reader.readline()
        finally:
            writer.close()
        reply = _reply(line, self.name)
        if reply is None:
            self.done = True
        elif self._trace is not None:
            self._trace.add("user", reply, dialogue=True, simulated=True)
        return reply


def _reply(line: bytes, name: str) -> str | None:
    if not line.endswith(b"\n"):
        raise ConnectionLost(f"user {name!r}: connection closed before the reply")
    try:
        data: Any = orjson.loads(line)
    except orjson.JSONDecodeError as exc:
        raise ProtocolError(f"user {name!r}: reply is not JSON: {exc}") from None
    if not isinstance(data, dict):
        raise ProtocolError(f"user {name!r}: reply is not an object")
    error = data.get("error")
    if isinstance(error, dict):
        raise RemoteError(int(error.get("code", 0)), str(error.get("message", "")))
    reply = data.get("reply")
    if reply is not None and not isinstance(reply, str):
        raise ProtocolError(f"user {name!r}: reply is {type(reply).__name__}, not a string")
    return reply


def user_tool(client: UserClient, *, name: str = "talk_to_user") -> Tool:
    """A tool that sends one message to the simulated user and returns the reply."""

    async def talk(message: str) -> ToolResult:
        reply = None if client.done else await client.send(message)
        return ToolResult("The user has ended the conversation." if reply is None else reply)

    return text_tool(
        name,
        "Send a message to the user you are helping and get their reply. When the user "
        "has ended the conversation, the result says so: then give your final answer.",
        ("message", "What to say."),
        talk,
    )
