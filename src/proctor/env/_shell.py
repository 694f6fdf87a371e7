"""The `shell` capability: run commands in the environment's substrate.

`ShellServer` listens on a Unix socket in a private directory inside the substrate
(mode 0700: only its own uid can connect); from outside, `ShellClient` reaches it only
through the control channel's tunnel (`run.binding("shell").url`).

Protocol (shell/1). A connection carries UTF-8 JSON objects, one per line (`\\n`), each
at most 64 MiB. The client sends requests; the server answers each with exactly one
reply carrying the request's `id`. Requests on one connection run concurrently and are
answered as they finish, so match replies by `id`, not by order.

    request  {"id": str | int, "command": str, "timeout"?: float, "cwd"?: str,
              "stdin"?: str, "env"?: {str: str}, "max_output"?: int}
    reply    {"id", "exit_code": int, "stdout": str, "stderr": str,
              "timed_out": bool, "truncated": bool, "duration": float}
    error    {"id": <id or null>, "error": {"code": int, "message": str}}

- `command` runs as `shell -c command` (bash when present, else /bin/sh) in a new
  session, so it leads its own process group. `cwd` is relative to the server's
  directory; `env` is added to the server's command environment (an allowlist of its
  own, see `ShellServer`). Without `stdin` the command
  reads /dev/null.
- `timeout` (seconds, default the server's) bounds the whole command: when it expires
  the process group is killed (SIGKILL), `timed_out` is true and `exit_code` is -9. A
  negative `exit_code` is always the signal that ended the shell.
- stdout and stderr are each capped at `max_output` bytes (the server's cap when
  absent or larger): the head and the tail are kept around a `[... N bytes omitted
  ...]` line and `truncated` is true. Bytes are decoded as UTF-8, invalid ones replaced.
- The reply is sent once the shell has exited and its output pipes have closed.
  Background processes that keep the pipes open get a short grace (`linger`), then
  the reply goes without their later output (the pipes close, so a later write may
  end them); they keep running until the server stops.
- EOF or a dropped connection ends the connection: its running commands' process
  groups are killed and their replies are never sent. Keep the connection open until
  every reply has arrived.
- Errors: a line that is not a JSON object or a request with bad fields gets code
  -32602 (the connection goes on); a command that cannot start (missing `cwd`) gets
  -32000; a line over the size limit gets -32600 with id null, then the connection
  closes. Stopping the server kills every process group it started.
"""

from __future__ import annotations

import asyncio
import contextlib
import math
import os
import shutil
import signal
import time
from collections.abc import Iterable, Mapping
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any, cast

import orjson

from .._environ import allowed_environ
from .._errors import ProtocolError
from .._loop import outlast_cancel
from ._capability_server import CapabilityServer
from ._line_protocol import BAD_REQUEST, FAILED, MAX_LINE, TOO_LARGE, _LineError, read_request

__all__ = ["MAX_LINE", "ShellResult", "ShellServer"]


@dataclass(frozen=True, slots=True)
class ShellResult:
    """What one command did."""

    exit_code: int
    stdout: str
    stderr: str
    timed_out: bool = False
    truncated: bool = False
    duration: float = 0.0

    @property
    def ok(self) -> bool:
        """The command exited 0 within its timeout."""
        return self.exit_code == 0 and not self.timed_out

    def to_wire(self) -> dict[str, Any]:
        """The reply fields (without `id`)."""
        return asdict(self)

    @classmethod
    def from_wire(cls, data: dict[str, Any]) -> ShellResult:
        """Parse a reply.

        Raises:
            ProtocolError: a field is missing or has the wrong type.
        """
        try:
            result = cls(
                int(data["exit_code"]),
                str(data["stdout"]),
                str(data["stderr"]),
                bool(data.get("timed_out", False)),
                bool(data.get("truncated", False)),
                float(data.get("duration", 0.0)),
            )
        except (KeyError, TypeError, ValueError) as exc:
            raise ProtocolError(f"malformed shell reply: {exc!r}") from None
        return result


class ShellServer(CapabilityServer):
    """Run shell commands for clients on a private Unix socket (protocol in the module doc).

    The socket (`url`: `unix:///<private dir>/shell.sock`) lives in a fresh directory
    only this process's uid may enter, created by `start` and removed by `aclose`; the
    tunnel reaches it from the environment server.

    Args:
        cwd: directory commands run in (default: the current one).
        env: variables for every command. Commands get none of this process's others
            but those of `proctor._environ.SAFE` (PATH, HOME, LANG, ...) and
            `pass_env`: an agent's command never sees a key or token the server holds.
        pass_env: names of more variables of this process to pass on (when set).
        shell: the shell binary (default: bash if installed, else /bin/sh).
        timeout: default per-command timeout in seconds.
        max_output: cap in bytes on each of stdout and stderr.
        linger: seconds to wait for output pipes held open by background processes.
    """

    kind = "shell"

    def __init__(
        self,
        *,
        cwd: str | Path | None = None,
        env: Mapping[str, str] | None = None,
        pass_env: Iterable[str] = (),
        shell: str | None = None,
        timeout: float = 120.0,
        max_output: int = 1024 * 1024,
        linger: float = 0.5,
    ) -> None:
        super().__init__()
        self.cwd = Path(cwd) if cwd is not None else None
        self.env = dict(env or {})
        self.pass_env = frozenset(pass_env)
        self.shell = shell or shutil.which("bash") or "/bin/sh"
        self.timeout = timeout
        self.max_output = max_output
        self.linger = linger
        self._groups: set[int] = set()

    def __repr__(self) -> str:
        return f"<ShellServer {self._where() or 'stopped'} cwd={str(self.cwd or '.')!r}>"

    async def aclose(self) -> None:
        """Stop listening, remove the socket's directory, kill every running command and
        every group ever started."""
        await super().aclose()
        for pgid in self._groups:
            _killpg(pgid)
        self._groups.clear()

    async def run(
        self,
        command: str,
        *,
        timeout: float | None = None,  # noqa: ASYNC109 - kills the process group, not the await
        cwd: str | Path | None = None,
        stdin: str | None = None,
        env: Mapping[str, str] | None = None,
        max_output: int | None = None,
    ) -> ShellResult:
        """Run `command` here, as a request would (for graders inside the environment).

        Raises:
            FileNotFoundError: `cwd` is not a directory.
            OSError: the shell could not start.
            ValueError: the command or an env value holds a NUL byte.
        """
        limit = self.timeout if timeout is None else timeout
        directory = (self.cwd or Path.cwd()) / (cwd or "")
        if not directory.is_dir():
            raise FileNotFoundError(f"cwd {str(directory)!r} is not a directory")
        cap = min(max_output or self.max_output, self.max_output)
        loop = asyncio.get_running_loop()
        proc = _Process(cap, loop)
        t0 = time.monotonic()
        # Shielded: a cancel while the shell starts must still see its group registered
        # (and killed, and the shell reaped), or its background children are orphaned.
        spawn = asyncio.ensure_future(
            loop.subprocess_exec(
                lambda: proc,
                self.shell,
                "-c",
                command,
                stdin=asyncio.subprocess.PIPE if stdin is not None else asyncio.subprocess.DEVNULL,
                stdout=asyncio.subprocess.PIPE,
                stderr=asyncio.subprocess.PIPE,
                cwd=directory,
                env={**allowed_environ(self.pass_env), **self.env, **(env or {})},
                start_new_session=True,
            )
        )
        try:
            transport, _ = await asyncio.shield(spawn)
            cancelled = False
        except asyncio.CancelledError:
            transport, _ = await spawn
            cancelled = True
        pgid = transport.get_pid()
        self._groups.add(pgid)
        try:
            if cancelled:
                raise asyncio.CancelledError
            if stdin is not None:
                _feed(transport, stdin)
            timed_out = await proc.finish(pgid, limit, self.linger)
        finally:
            try:
                if not proc.exited.done():  # cancelled: take the whole group down with it
                    _killpg(pgid)
                    # ...and reap the shell, or its Popen outlives the loop unreaped (a
                    # SIGKILLed group exits; a 2 s limit here ran out on a loaded machine)
                    await outlast_cancel(proc.exited)
            finally:
                transport.close()
            if not _alive(pgid):
                self._groups.discard(pgid)
        stdout, cut_out = proc.stdout.text()
        stderr, cut_err = proc.stderr.text()
        code = transport.get_returncode()
        assert code is not None  # `finish` returned, so the shell has exited
        return ShellResult(
            code,
            stdout,
            stderr,
            timed_out,
            cut_out or cut_err,
            round(time.monotonic() - t0, 6),
        )

    # -- protocol ------------------------------------------------------------------------

    async def _connection(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        mine: set[asyncio.Task[None]] = set()
        try:
            while line := await _next_line(reader, writer):
                task = self._in_flight(self._answer(line, writer))
                mine.add(task)
                task.add_done_callback(mine.discard)
        finally:
            for task in mine:
                task.cancel()
            await asyncio.gather(*mine, return_exceptions=True)
            writer.close()

    async def _answer(self, line: bytes, writer: asyncio.StreamWriter) -> None:
        rid: Any = None
        try:
            req = read_request(line)
            rid = req.get("id")
            result = await self._run_request(req)
            reply: dict[str, Any] = {"id": rid, **result.to_wire()}
        except _LineError as exc:
            reply = {"id": rid, "error": {"code": exc.code, "message": str(exc)}}
        writer.write(orjson.dumps(reply) + b"\n")
        with contextlib.suppress(ConnectionError):
            await writer.drain()

    async def _run_request(self, req: dict[str, Any]) -> ShellResult:
        if not isinstance(req.get("command"), str):
            raise _LineError(BAD_REQUEST, "command must be a string")
        timeout = req.get("timeout")
        if timeout is not None and not _positive(timeout):
            raise _LineError(BAD_REQUEST, f"timeout must be a positive number, not {timeout!r}")
        max_output = req.get("max_output")
        if max_output is not None and not (_positive(max_output) and type(max_output) is int):
            raise _LineError(BAD_REQUEST, "max_output must be a positive integer")
        for key in ("cwd", "stdin"):
            if req.get(key) is not None and not isinstance(req[key], str):
                raise _LineError(BAD_REQUEST, f"{key} must be a string")
        env = req.get("env") or {}
        if not isinstance(env, dict) or not all(isinstance(v, str) for v in env.values()):
            raise _LineError(BAD_REQUEST, "env must map names to strings")
        try:
            return await self.run(
                req["command"],
                timeout=timeout,
                cwd=req.get("cwd"),
                stdin=req.get("stdin"),
                env=env,
                max_output=max_output,
            )
        except (OSError, ValueError) as exc:
            raise _LineError(FAILED, f"cannot start: {exc}") from None


async def _next_line(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> bytes | None:
    """The next non-blank request line; None at EOF or after an oversized line."""
    while True:
        try:
            line = await reader.readuntil(b"\n")
        except asyncio.IncompleteReadError:
            return None
        except asyncio.LimitOverrunError:
            error = {"code": TOO_LARGE, "message": f"line over {MAX_LINE} bytes"}
            writer.write(orjson.dumps({"id": None, "error": error}) + b"\n")
            return None
        except ConnectionError:
            return None
        if line.strip():
            return line


def _positive(value: Any) -> bool:
    return (
        isinstance(value, int | float)
        and not isinstance(value, bool)
        and math.isfinite(value)
        and value > 0
    )


def _feed(transport: asyncio.SubprocessTransport, text: str) -> None:
    pipe = cast(asyncio.WriteTransport | None, transport.get_pipe_transport(0))
    if pipe is not None:
        pipe.write(text.encode())
        pipe.write_eof()


def _killpg(pgid: int) -> None:
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(pgid, signal.SIGKILL)


def _alive(pgid: int) -> bool:
    try:
        os.killpg(pgid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # the group exists, we just may not signal all of it
        pass
    return True


class _Capped:
    """Keep the head and the tail of a byte stream within `limit` bytes."""

    def __init__(self, limit: int) -> None:
        self.head_max = limit - limit // 2
        self.tail_max = limit // 2
        self.head = bytearray()
        self.tail = bytearray()
        self.total = 0

    def feed(self, data: bytes) -> None:
        self.total += len(data)
        room = self.head_max - len(self.head)
        if room > 0:
            self.head += data[:room]
            data = data[room:]
        if data and self.tail_max:
            self.tail += data
            if len(self.tail) > 2 * self.tail_max:
                del self.tail[: -self.tail_max]

    def text(self) -> tuple[str, bool]:
        """The kept text and whether anything was dropped."""
        tail = self.tail[-self.tail_max :] if self.tail_max else b""
        omitted = self.total - len(self.head) - len(tail)
        head = self.head.decode(errors="replace")
        if omitted <= 0:
            return head + tail.decode(errors="replace"), False
        return f"{head}\n[... {omitted} bytes omitted ...]\n{tail.decode(errors='replace')}", True


class _Process(asyncio.SubprocessProtocol):
    """Collects capped output; resolves `exited` and `drained` separately.

    asyncio's own `Process.wait()` waits for the pipes too, so a background process
    holding them would stall it; here the exit and the pipes are watched apart.
    """

    def __init__(self, cap: int, loop: asyncio.AbstractEventLoop) -> None:
        self.stdout = _Capped(cap)
        self.stderr = _Capped(cap)
        self.exited: asyncio.Future[None] = loop.create_future()
        self.drained: asyncio.Future[None] = loop.create_future()
        self._open = {1, 2}

    def pipe_data_received(self, fd: int, data: bytes) -> None:
        (self.stdout if fd == 1 else self.stderr).feed(data)

    def pipe_connection_lost(self, fd: int, exc: Exception | None) -> None:
        self._open.discard(fd)
        if not self._open and not self.drained.done():
            self.drained.set_result(None)

    def process_exited(self) -> None:
        if not self.exited.done():
            self.exited.set_result(None)

    async def finish(self, pgid: int, limit: float, linger: float) -> bool:
        """Wait for the exit and the pipes; True when `limit` ran out and killed the group."""
        timed_out = False
        try:
            async with asyncio.timeout(limit):
                await asyncio.shield(self.exited)
        except TimeoutError:
            timed_out = True
            _killpg(pgid)
            await asyncio.shield(self.exited)
        with contextlib.suppress(TimeoutError):
            async with asyncio.timeout(linger):
                await asyncio.shield(self.drained)
        return timed_out
