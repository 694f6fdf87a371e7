"""HUD's `Workspace` on proctor: a directory served over SSH (`ssh/2`) by asyncssh."""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from .._environ import allowed_environ
from .._loop import outlast_cancel
from .hud.capabilities import Capability

__all__ = ["Workspace"]

_CHUNK = 65536
_LOGIN_TIMEOUT = 10.0  # seconds a connection may take to log in (asyncssh's default: 120)


class Workspace:
    """Serve `root` over SSH on 127.0.0.1 (a free port) while started.

    Each session runs `bash -c COMMAND` (or a bare `bash` reading its stdin) in `root`
    with the allowlisted environment plus `env`, as this process's user: HUD's
    bubblewrap sandbox is not mapped, so serve it in a proctor sandbox or container.
    Login is by a key pair made at `start` (the private key travels in the capability's
    `params`, as HUD's does, to authenticated control clients only); the daemon's host
    key is published for clients to pin. Port forwarding, agent forwarding and SFTP are
    off; a connection has 10 s to log in, at most 64 connections wait to log in at once
    (further ones are closed at once), and a connection opens at most 8 sessions at a
    time. A session whose channel closes has its process group killed.

    Raises:
        ImportError: a HUD `Workspace` option proctor does not map.
    """

    def __init__(
        self, root: str | Path, *, user: str = "agent", env: Mapping[str, str] | None = None,
        **options: Any,
    ) -> None:  # fmt: skip
        if options:
            raise ImportError(
                f"Workspace({', '.join(sorted(options))}=...) is not supported by proctor's "
                "HUD compatibility layer (mapped: root, user, env)"
            )
        self.root = Path(root)
        self.user = user
        self.env = dict(env or {})
        self._server: Any = None
        self._keys: tuple[str, str] | None = None
        self._sessions: set[asyncio.Task[None]] = set()

    def __getattr__(self, name: str) -> Any:
        if name.startswith("_"):
            raise AttributeError(name)
        raise AttributeError(
            f"Workspace.{name} is not supported by proctor's HUD compatibility layer "
            "(mapped: start, stop, capability)"
        )

    async def start(self) -> None:
        """Make the keys and listen.

        Raises:
            ImportError: asyncssh is not installed (`pip install 'proctor[ssh]'`).
        """
        try:
            import asyncssh
        except ImportError as exc:
            raise ImportError("a HUD workspace needs `pip install 'proctor[ssh]'`") from exc
        from ._workspace_gate import Gate

        self.root.mkdir(parents=True, exist_ok=True)
        host, client = (asyncssh.generate_private_key("ssh-ed25519") for _ in range(2))
        self._server = await asyncssh.create_server(
            Gate(self._session).server, "127.0.0.1", 0, server_host_keys=[host],
            authorized_client_keys=asyncssh.import_authorized_keys(
                client.export_public_key().decode()
            ),
            encoding=None, allow_scp=False,
            agent_forwarding=False, x11_forwarding=False, sftp_factory=None,
            login_timeout=_LOGIN_TIMEOUT,
        )  # fmt: skip
        self._keys = (host.export_public_key().decode(), client.export_private_key().decode())

    def capability(self, name: str = "shell") -> Capability:
        """The `ssh/2` capability for the running daemon.

        Raises:
            RuntimeError: not started.
        """
        if self._server is None or self._keys is None:
            raise RuntimeError("the workspace is not started")
        port = self._server.sockets[0].getsockname()[1]
        host_key, client_key = self._keys
        return Capability.ssh(
            name=name, url=f"ssh://{self.user}@127.0.0.1:{port}", user=self.user,
            host_pubkey=host_key, client_key=client_key, cwd=str(self.root.resolve()),
        )  # fmt: skip

    async def stop(self) -> None:
        """Stop listening and end every session: its process group is killed and reaped
        before this returns, so no child (or its pipes) outlives the workspace."""
        server, self._server = self._server, None
        if server is not None:
            server.close()
            await server.wait_closed()
        for task in self._sessions:
            task.cancel()
        await asyncio.gather(*self._sessions, return_exceptions=True)

    async def _session(self, process: Any) -> None:
        task = asyncio.current_task()
        assert task is not None
        self._sessions.add(task)
        try:
            await self._serve(process)
        finally:
            self._sessions.discard(task)

    async def _serve(self, process: Any) -> None:
        argv = ["/bin/bash", "-c", process.command] if process.command else ["/bin/bash"]
        proc = await asyncio.create_subprocess_exec(
            *argv, cwd=self.root, env={**allowed_environ(), "HOME": str(self.root), **self.env},
            stdin=asyncio.subprocess.PIPE, stdout=asyncio.subprocess.PIPE,
            stderr=asyncio.subprocess.PIPE, start_new_session=True,
        )  # fmt: skip
        feed = asyncio.ensure_future(_feed(process.stdin, proc))
        work = asyncio.ensure_future(_relay(proc, process))
        closed = asyncio.ensure_future(process.wait_closed())
        try:
            await asyncio.wait({work, closed}, return_when=asyncio.FIRST_COMPLETED)
            if work.done() and not closed.done():
                process.exit(work.result())
        finally:
            for task in (feed, work, closed):
                task.cancel()
            if proc.stdin is not None:  # a cancelled feed never closed it: the
                proc.stdin.close()  # transport would stay open (ResourceWarning)
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.killpg(proc.pid, signal.SIGKILL)
            await outlast_cancel(asyncio.ensure_future(proc.wait()))  # reaped


async def _feed(stdin: Any, proc: asyncio.subprocess.Process) -> None:
    """The session's stdin into the command, then EOF."""
    assert proc.stdin is not None
    with contextlib.suppress(Exception):
        while data := await stdin.read(_CHUNK):
            proc.stdin.write(data)
            await proc.stdin.drain()
    proc.stdin.close()


async def _relay(proc: asyncio.subprocess.Process, process: Any) -> int:
    """The command's output to the session; its exit code."""
    assert proc.stdout is not None and proc.stderr is not None
    await asyncio.gather(_copy(proc.stdout, process.stdout), _copy(proc.stderr, process.stderr))
    return await proc.wait()


async def _copy(source: asyncio.StreamReader, sink: Any) -> None:
    while data := await source.read(_CHUNK):
        sink.write(data)
        await sink.drain()
