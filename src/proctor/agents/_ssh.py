"""An SSH shell for `ToolAgent`: commands over an `ssh` capability (HUD's `ssh/2`).

HUD publishes its workspace shell as `ssh/2`: the daemon's URL, and in `params` the
`user`, the daemon's `host_pubkey` and the client's private key (`client_key`, the key
itself, or `client_key_path`), the remote `shell` and the `cwd` sessions start in. The
agent dials the routed URL (`run.binding(name)`), so the daemon is reached through the
environment's tunnel wherever it runs.
"""

from __future__ import annotations

import asyncio
import contextlib
import shlex
import socket
import time
from typing import TYPE_CHECKING, Any

from .._urls import host_port, unix_path
from ..env import ShellResult

if TYPE_CHECKING:
    from ..env import Capability

__all__ = ["SshShell"]

_CHUNK = 65536
_POSIX_SHELLS = frozenset({"bash", "sh", "zsh"})


class SshShell:
    """Run one command per call over SSH, with a `ShellClient`'s `run` and `timeout`.

    One connection per shell, opened on the first command and closed by `aclose`. The
    daemon's host key is checked against `params["host_pubkey"]` when the capability
    gives one (HUD's own client checks nothing). A command past `timeout` seconds is
    ended (its channel closed) and reported as timed out with the output so far; each
    output stream is cut at `max_output` bytes. With a POSIX `shell` and a `cwd`,
    commands run in `cwd`.

    Raises:
        ImportError: `asyncssh` is not installed (`pip install 'proctor[ssh]'`).
    """

    def __init__(
        self, capability: Capability, *, timeout: float | None = None, max_output: int = 16384
    ) -> None:
        try:
            import asyncssh  # noqa: F401
        except ImportError as exc:
            raise ImportError("SSH shells need `pip install 'proctor[ssh]'`") from exc
        self.capability = capability
        self.timeout = timeout
        self.max_output = max_output
        self._conn: Any = None
        self._lock = asyncio.Lock()

    def __repr__(self) -> str:
        return f"SshShell({self.capability.url!r})"

    async def run(self, command: str, *, stdin: str | None = None) -> ShellResult:
        """Run `command` (stdin from `stdin`, else empty) and return what it did.

        Raises:
            OSError: the daemon cannot be reached.
            asyncssh.Error: the SSH handshake, login or channel failed.
        """
        conn = await self._connection()
        t0 = time.monotonic()
        process = await conn.create_process(self._command(command), encoding=None)
        out, err = _Capture(self.max_output), _Capture(self.max_output)
        if stdin:
            process.stdin.write(stdin.encode())
        process.stdin.write_eof()
        timed_out = False
        try:
            async with asyncio.timeout(self.timeout):
                await asyncio.gather(out.drain(process.stdout), err.drain(process.stderr))
                await process.wait_closed()
        except TimeoutError:
            timed_out = True
            process.close()
        code = process.returncode
        return ShellResult(
            exit_code=code if code is not None and not timed_out else -1,
            stdout=out.text(),
            stderr=err.text(),
            timed_out=timed_out,
            truncated=out.truncated or err.truncated,
            duration=time.monotonic() - t0,
        )

    async def aclose(self) -> None:
        """Close the connection, if one was opened."""
        conn, self._conn = self._conn, None
        if conn is not None:
            conn.close()
            with contextlib.suppress(Exception):
                await conn.wait_closed()

    def _command(self, command: str) -> str:
        params = self.capability.params
        cwd = params.get("cwd")
        if cwd and str(params.get("shell", "bash")) in _POSIX_SHELLS:
            return f"cd -- {shlex.quote(str(cwd))} && {command}"
        return command

    async def _connection(self) -> Any:
        async with self._lock:
            if self._conn is None or self._conn.is_closed():
                self._conn = await _connect(self.capability)
            return self._conn


class _Capture:
    """One output stream, kept up to `limit` bytes (the rest is read and dropped)."""

    def __init__(self, limit: int) -> None:
        self.limit = limit
        self.data = bytearray()
        self.truncated = False

    async def drain(self, stream: Any) -> None:
        while chunk := await stream.read(_CHUNK):
            room = self.limit - len(self.data)
            self.truncated = self.truncated or len(chunk) > room
            self.data += chunk[: max(room, 0)]

    def text(self) -> str:
        return self.data.decode("utf-8", errors="replace")


async def _connect(cap: Capability) -> Any:
    """An `asyncssh` connection to `cap`: its key, user and (when given) host key."""
    import asyncssh

    params = cap.params
    keys: list[Any] | None = None
    if params.get("client_key"):
        keys = [asyncssh.import_private_key(str(params["client_key"]))]
    elif params.get("client_key_path"):
        keys = [str(params["client_key_path"])]
    known: Any = None
    if params.get("host_pubkey"):
        known = ([asyncssh.import_public_key(str(params["host_pubkey"]))], [], [])
    options: dict[str, Any] = {
        "username": str(params.get("user") or _url_user(cap.url) or "agent"),
        "client_keys": keys,
        "known_hosts": known,
        "config": [],
        "agent_path": None,
    }
    path = unix_path(cap.url)
    if path is None:
        host, port = host_port(cap.url)
        return await asyncssh.connect(host, port, **options)
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    sock.setblocking(False)
    try:
        await asyncio.get_running_loop().sock_connect(sock, path)
    except BaseException:
        sock.close()
        raise
    return await asyncssh.connect("localhost", sock=sock, **options)


def _url_user(url: str) -> str | None:
    netloc = url.partition("://")[2].split("/", 1)[0]
    return netloc.rpartition("@")[0] or None
