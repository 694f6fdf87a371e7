"""`SubprocessRuntime`: one child `python -m proctor.serve` per rollout."""

from __future__ import annotations

import asyncio
import collections
import contextlib
import logging
import os
import secrets
import signal
import subprocess
import sys
from collections.abc import AsyncIterator, Mapping, Sequence
from contextlib import AbstractAsyncContextManager
from pathlib import Path
from typing import IO, TYPE_CHECKING, cast

from .._errors import RuntimeLaunchError
from ._base import Endpoint, Provider

if TYPE_CHECKING:
    from ..tasks._task import Task

__all__ = ["SubprocessRuntime"]

log = logging.getLogger("proctor.runtimes.subprocess")

PORT_PREFIXES = (b"PROCTOR_SERVE_PORT=", b"HUD_SERVE_PORT=")
_MAX_LINE = 1 << 16  # longer output lines are logged in pieces of this size
_TAIL_LINE = 2000  # characters kept per stderr line quoted in a launch error
_LAST_WORDS = 0.5  # seconds a dead child's pipes may still deliver its stderr
_REAP = 5.0  # seconds to wait for the child watcher after SIGKILL


class SubprocessRuntime(Provider):
    """Serve each rollout's environment in its own child process.

    The child runs `python -m proctor.serve SOURCE` (or `command`), and the first
    stdout line starting with `PROCTOR_SERVE_PORT=` or `HUD_SERVE_PORT=` gives the
    port. Other output goes to `log` (a file path) or the `proctor.runtimes.subprocess`
    logger at DEBUG. The child leads its own process group, which is terminated (then
    killed after `stop_timeout`) on exit.

    Args:
        source: Python file or folder defining the environment.
        python: interpreter for the child (default: this one).
        env: extra environment variables for the child.
        env_name: which environment to serve when the source defines several.
        command: a full command instead of `python -m proctor.serve SOURCE`.
        cwd: working directory of the child.
        startup_timeout: seconds to wait for the port line.
        stop_timeout: seconds between SIGTERM and SIGKILL.
        log: file the child's other output is appended to.
        warm: fork each child from a zygote that loaded `source` once (a few ms
            instead of a fresh interpreter's ~80); each rollout still gets its own
            process, hooks and port. The zygote starts on first use and stops on
            `aclose()` (or `async with`), or when this process exits. Forking shares
            whatever the source did at import time, so sources that start threads or
            open connections at import must use initialize hooks instead.
    """

    def __init__(
        self,
        source: str | Path | None = None,
        *,
        python: str | None = None,
        env: Mapping[str, str] | None = None,
        env_name: str | None = None,
        command: Sequence[str] | None = None,
        cwd: str | Path | None = None,
        startup_timeout: float = 60.0,
        stop_timeout: float = 5.0,
        log: str | Path | None = None,
        warm: bool = False,
    ) -> None:
        if source is None and command is None:
            raise ValueError("SubprocessRuntime needs a source or a command")
        if warm and command is not None:
            raise ValueError("warm=True forks proctor's own server; it takes no command")
        self.source = source
        self.python = python or sys.executable
        self.env = dict(env or {})
        self.env_name = env_name
        self.command = list(command) if command else None
        self.cwd = cwd
        self.startup_timeout = startup_timeout
        self.stop_timeout = stop_timeout
        self.log = log
        self.warm = warm
        self._zygote: _Zygote | None = None
        self._zygote_lock: tuple[asyncio.AbstractEventLoop, asyncio.Lock] | None = None

    def __repr__(self) -> str:
        return f"SubprocessRuntime({self.source or self.command!r})"

    def __call__(self, task: Task) -> AbstractAsyncContextManager[Endpoint]:
        return self._forked() if self.warm else self._endpoint()

    async def __aenter__(self) -> SubprocessRuntime:
        if self.warm:
            await self._warm_zygote()
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.aclose()

    async def aclose(self) -> None:
        """Stop the zygote of a warm runtime (children already stopped stay stopped)."""
        zygote, self._zygote = self._zygote, None
        if zygote is not None:
            await zygote.stop()

    def argv(self) -> list[str]:
        """The child's command line (the zygote's, for a warm runtime)."""
        if self.command is not None:
            return self.command
        argv = [self.python, "-m", "proctor.serve", str(self.source)]
        return [*argv, "--env", self.env_name] if self.env_name else argv

    @contextlib.asynccontextmanager
    async def _endpoint(self) -> AsyncIterator[Endpoint]:
        child = _Child(self)
        try:
            port = await child.start()
            yield Endpoint(f"tcp://127.0.0.1:{port}")
        finally:
            await child.stop()

    @contextlib.asynccontextmanager
    async def _forked(self) -> AsyncIterator[Endpoint]:
        zygote = await self._warm_zygote()
        pid, port = await zygote.fork()
        try:
            yield Endpoint(f"tcp://127.0.0.1:{port}")
        finally:
            await _stop_forked(pid, self.stop_timeout)

    async def _warm_zygote(self) -> _Zygote:
        zygote = self._zygote
        if zygote is not None and zygote.alive:
            return zygote
        loop = asyncio.get_running_loop()
        if self._zygote_lock is None or self._zygote_lock[0] is not loop:
            self._zygote_lock = (loop, asyncio.Lock())
        async with self._zygote_lock[1]:
            if self._zygote is None or not self._zygote.alive:
                if self._zygote is not None:
                    await self._zygote.stop()
                argv = [self.python, "-m", "proctor.runtimes._zygote", str(self.source)]
                zygote = _Zygote(self, argv + (["--env", self.env_name] if self.env_name else []))
                try:
                    await zygote.start()
                except BaseException:
                    await zygote.stop()
                    raise
                self._zygote = zygote
            return self._zygote


class _Child:
    """One child process: spawn, read its port, route its output, stop its group."""

    def __init__(self, spec: SubprocessRuntime) -> None:
        self.spec = spec
        self.transport: asyncio.SubprocessTransport | None = None
        self.tail: collections.deque[bytes] = collections.deque(maxlen=20)
        self.sink: IO[bytes] | None = None
        self.exited = asyncio.Event()
        self.drained = asyncio.Event()  # exited and every pipe at EOF
        self.port: asyncio.Future[int] = asyncio.get_running_loop().create_future()

    stdin = subprocess.DEVNULL

    def argv(self) -> list[str]:
        """The command line this process runs."""
        return self.spec.argv()

    @property
    def pid(self) -> int | None:
        """The child's pid (also its process group id), once spawned."""
        return None if self.transport is None else self.transport.get_pid()

    async def start(self) -> int:
        """Spawn the child and wait for its port line.

        Raises:
            RuntimeLaunchError: it cannot be spawned, exits first, or stays silent too long.
        """
        spec = self.spec
        argv = self.argv()
        if spec.log is not None:
            try:
                self.sink = open(spec.log, "ab")  # noqa: SIM115, ASYNC230 - closed in stop()
            except OSError as exc:
                raise RuntimeLaunchError(f"cannot open log file {spec.log}: {exc}") from exc
        loop = asyncio.get_running_loop()
        try:
            self.transport, _ = await loop.subprocess_exec(
                lambda: _ChildProtocol(self),
                *argv,
                stdin=self.stdin,
                stdout=subprocess.PIPE,
                stderr=subprocess.PIPE,
                env={**os.environ, **spec.env, "PYTHONUNBUFFERED": "1"},
                cwd=spec.cwd,
                start_new_session=True,
            )
        except OSError as exc:
            raise RuntimeLaunchError(f"cannot start {argv[0]}: {exc}") from exc
        try:
            async with asyncio.timeout(spec.startup_timeout):
                return await self.port
        except TimeoutError:
            raise RuntimeLaunchError(
                self._why(f"no port announced within {spec.startup_timeout:g}s")
            ) from None

    def line(self, fd: int, line: bytes) -> None:
        """One line of the child's output (without its newline)."""
        if fd == 1 and not self.port.done() and line.startswith(PORT_PREFIXES):
            self._announced(line)
            return
        if fd == 2:
            self.tail.append(line[:_TAIL_LINE])
        if self.sink is not None:
            self.sink.write(line + b"\n")
        elif log.isEnabledFor(logging.DEBUG):
            name = "stdout" if fd == 1 else "stderr"
            log.debug("[%s %s] %s", self.pid, name, line.decode(errors="replace"))

    def _announced(self, line: bytes) -> None:
        value = line.partition(b"=")[2].strip()
        if value.isdigit() and 0 < int(value) < 65536:
            self.port.set_result(int(value))
        else:
            self.port.set_exception(RuntimeLaunchError(self._why(f"bad port line {line!r}")))

    def process_exited(self) -> None:
        """The child is gone; fail a pending start once its last output had a moment."""
        self.exited.set()
        asyncio.get_running_loop().call_later(_LAST_WORDS, self.no_port)

    def no_port(self) -> None:
        """Fail a pending start: the child exited (or closed its output) without a port."""
        if not self.port.done():
            code = None if self.transport is None else self.transport.get_returncode()
            self.port.set_exception(
                RuntimeLaunchError(self._why(f"exited with code {code} before announcing a port"))
            )

    def _why(self, what: str) -> str:
        argv = " ".join(self.argv())
        tail = b"\n".join(self.tail).decode(errors="replace").strip()
        return f"{argv}: {what}" + (f"\n--- stderr (last lines) ---\n{tail}" if tail else "")

    async def stop(self) -> None:
        """Terminate the process group, kill it after the grace period; always reap.

        Exit is judged by the process itself, not by its pipes: a grandchild that holds
        them open must not make a clean exit look like a hang.
        """
        transport, pid = self.transport, self.pid
        if not self.port.done():  # stopped while starting: nobody awaits the port now
            self.port.cancel()
        elif not self.port.cancelled():
            self.port.exception()  # a launch failure already raised; mark it retrieved
        try:
            if transport is not None and pid is not None and not self.exited.is_set():
                _killpg(pid, signal.SIGTERM)
                try:
                    await asyncio.wait_for(self.exited.wait(), self.spec.stop_timeout)
                except TimeoutError:
                    log.warning(
                        "child %s ignored SIGTERM for %gs; killing", pid, self.spec.stop_timeout
                    )
        finally:
            if transport is not None and pid is not None:
                _killpg(pid, signal.SIGKILL)  # stragglers in the group, if any
                # Reaped by the child watcher; closing first would race it for the pid.
                # Then its last output, unless something outside the group holds the pipes.
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(self.exited.wait(), _REAP)
                    await asyncio.wait_for(self.drained.wait(), _LAST_WORDS)
                transport.close()
            if self.sink is not None:
                self.sink.close()


class _ChildProtocol(asyncio.SubprocessProtocol):
    """Split the child's output into lines (of any length) and report its exit."""

    def __init__(self, child: _Child) -> None:
        self.child = child
        self.partial = {1: b"", 2: b""}

    def pipe_data_received(self, fd: int, data: bytes) -> None:
        *lines, rest = (self.partial[fd] + data).split(b"\n")
        if len(rest) > _MAX_LINE:  # no newline in sight: pass it on in pieces
            lines.append(rest)
            rest = b""
        self.partial[fd] = rest
        for line in lines:
            self.child.line(fd, line)

    def pipe_connection_lost(self, fd: int, exc: Exception | None) -> None:
        rest, self.partial[fd] = self.partial.get(fd, b""), b""
        if rest:
            self.child.line(fd, rest)

    def process_exited(self) -> None:
        self.child.process_exited()

    def connection_lost(self, exc: Exception | None) -> None:
        self.child.drained.set()
        self.child.no_port()  # exited and every pipe closed: no more output is coming


def _killpg(pid: int, sig: int) -> None:
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(pid, sig)


class _Zygote(_Child):
    """The warm pool's parent process: forks a served child per `fork()` call.

    Reuses `_Child` for spawning, output routing and stopping; its stdout carries
    `READY` and `TOKEN PID PORT` lines instead of a port line.
    """

    stdin = subprocess.PIPE

    def __init__(self, spec: SubprocessRuntime, argv: list[str]) -> None:
        super().__init__(spec)
        self._argv = argv
        self.waiting: dict[str, asyncio.Future[tuple[int, int]]] = {}

    def argv(self) -> list[str]:
        return self._argv

    @property
    def alive(self) -> bool:
        """Whether the zygote can still fork."""
        return self.port.done() and not self.port.exception() and not self.exited.is_set()

    async def fork(self) -> tuple[int, int]:
        """Fork a served child; return its (pid, port).

        Raises:
            RuntimeLaunchError: the zygote is gone or the child failed to serve.
        """
        token = secrets.token_hex(8)
        fut: asyncio.Future[tuple[int, int]] = asyncio.get_running_loop().create_future()
        self.waiting[token] = fut
        try:
            stdin = self.transport.get_pipe_transport(0) if self.transport else None
            if stdin is None or not self.alive:
                raise RuntimeLaunchError(self._why("the zygote is not running"))
            # uvloop's pipe transports do not subclass asyncio's; they do write.
            cast("asyncio.WriteTransport", stdin).write(f"{token}\n".encode())
            async with asyncio.timeout(self.spec.startup_timeout):
                return await fut
        except TimeoutError:
            raise RuntimeLaunchError(
                self._why(f"forked child announced no port within {self.spec.startup_timeout:g}s")
            ) from None
        except BaseException:
            if fut.done() and not fut.cancelled() and fut.exception() is None:
                await _stop_forked(fut.result()[0], self.spec.stop_timeout)
            raise
        finally:
            del self.waiting[token]

    def line(self, fd: int, line: bytes) -> None:
        if fd != 1:
            super().line(fd, line)
        elif line == b"READY" and not self.port.done():
            self.port.set_result(0)
        else:
            token, _, rest = line.decode(errors="replace").partition(" ")
            fut = self.waiting.get(token)
            if fut is None or fut.done():
                super().line(fd, line)
                return
            pid, _, port = rest.partition(" ")
            if port.isdigit() and pid.isdigit():
                fut.set_result((int(pid), int(port)))
            else:
                fut.set_exception(RuntimeLaunchError(self._why(f"forked child failed: {port}")))

    def process_exited(self) -> None:
        super().process_exited()
        for fut in self.waiting.values():
            if not fut.done():
                fut.set_exception(RuntimeLaunchError(self._why("the zygote exited")))

    async def stop(self) -> None:
        """Close the zygote's stdin (it exits, its children get SIGTERM), then reap it."""
        if self.transport is not None and not self.exited.is_set():
            stdin = self.transport.get_pipe_transport(0)
            if stdin is not None:
                stdin.close()
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self.exited.wait(), self.spec.stop_timeout)
        await super().stop()


async def _stop_forked(pid: int, stop_timeout: float) -> None:
    """SIGTERM a forked child's group, SIGKILL it after the grace period; wait for exit.

    The child is the zygote's, not ours, so its exit is watched through a pidfd.
    """
    try:
        fd = os.pidfd_open(pid)
    except ProcessLookupError:
        _killpg(pid, signal.SIGKILL)
        return
    loop = asyncio.get_running_loop()
    gone: asyncio.Future[None] = loop.create_future()

    def exited() -> None:
        if not gone.done():
            gone.set_result(None)

    loop.add_reader(fd, exited)
    try:
        _killpg(pid, signal.SIGTERM)
        try:
            await asyncio.wait_for(asyncio.shield(gone), stop_timeout)
        except TimeoutError:
            log.warning("child %s ignored SIGTERM for %gs; killing", pid, stop_timeout)
    finally:
        _killpg(pid, signal.SIGKILL)  # the child if it lingers, and any stragglers
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(asyncio.shield(gone), _REAP)
        loop.remove_reader(fd)
        os.close(fd)
