"""`ShellClient`: runs commands on a `ShellServer` (shell/1, see `_shell`), from outside."""

from __future__ import annotations

import asyncio
from collections.abc import Mapping
from typing import Any

import orjson

from .._errors import ConnectionLost
from .._urls import host_port, unix_path
from ._line_protocol import MAX_LINE, read_reply
from ._shell import ShellResult

__all__ = ["ShellClient"]


class ShellClient:
    """Run commands on a `ShellServer` at `url`, one connection per command.

    A cancelled `run` closes its connection, which kills the command's process group.

    Args:
        url: `unix:///path` or `tcp://host:port` (e.g. `run.binding("shell").url`).
        cwd: default working directory, relative to the server's.
        env: variables added to every command's environment.
        timeout: default per-command timeout in seconds (None: the server's).
        max_output: default cap in bytes on each output stream (None: the server's).

    Raises:
        ValueError: `url` names neither a socket path nor a host:port.
    """

    def __init__(
        self,
        url: str,
        *,
        cwd: str | None = None,
        env: Mapping[str, str] | None = None,
        timeout: float | None = None,
        max_output: int | None = None,
    ) -> None:
        self._path = unix_path(url)
        self._address = host_port(url) if self._path is None else None
        self.url = url
        self.cwd = cwd
        self.env = dict(env or {})
        self.timeout = timeout
        self.max_output = max_output

    def __repr__(self) -> str:
        return f"ShellClient({self.url!r})"

    async def run(
        self,
        command: str,
        *,
        timeout: float | None = None,  # noqa: ASYNC109 - the server enforces it on the group
        cwd: str | None = None,
        stdin: str | None = None,
        env: Mapping[str, str] | None = None,
    ) -> ShellResult:
        """Run one command and return its result.

        Raises:
            OSError: the server could not be reached.
            ConnectionLost: the connection closed before the reply.
            RemoteError: the server refused the request (bad fields, missing cwd).
            ProtocolError: the reply is malformed.
        """
        req: dict[str, Any] = {"id": 1, "command": command}
        fields = {
            "timeout": timeout if timeout is not None else self.timeout,
            "cwd": cwd if cwd is not None else self.cwd,
            "stdin": stdin,
            "env": {**self.env, **(env or {})} or None,
            "max_output": self.max_output,
        }
        req.update((k, v) for k, v in fields.items() if v is not None)
        if self._address is not None:
            reader, writer = await asyncio.open_connection(*self._address, limit=MAX_LINE)
        else:
            reader, writer = await asyncio.open_unix_connection(self._path, limit=MAX_LINE)
        try:
            writer.write(orjson.dumps(req) + b"\n")
            line = await reader.readline()
        finally:
            writer.close()
        if not line.endswith(b"\n"):
            raise ConnectionLost(f"{self.url}: shell connection closed before the reply")
        return _reply(line, self.url)


def _reply(line: bytes, url: str) -> ShellResult:
    return ShellResult.from_wire(read_reply(line, f"{url}: shell reply"))
