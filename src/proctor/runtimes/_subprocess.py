"""`SubprocessRuntime`: one child `python -m proctor.serve` per rollout."""

from __future__ import annotations

import asyncio
import collections
import contextlib
import logging
import os
import signal
import sys
from collections.abc import AsyncIterator, Mapping, Sequence
from contextlib import AbstractAsyncContextManager
from pathlib import Path
from typing import IO, TYPE_CHECKING

from .._errors import RuntimeLaunchError
from ._base import Endpoint, Provider

if TYPE_CHECKING:
    from ..tasks._task import Task

__all__ = ["SubprocessRuntime"]

log = logging.getLogger("proctor.runtimes.subprocess")

PORT_PREFIXES = (b"PROCTOR_SERVE_PORT=", b"HUD_SERVE_PORT=")


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
        startup_timeout: seconds to wait for the port line.
        stop_timeout: seconds between SIGTERM and SIGKILL.
        log: file the child's other output is appended to.
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
    ) -> None:
        if source is None and command is None:
            raise ValueError("SubprocessRuntime needs a source or a command")
        self.source = source
        self.python = python or sys.executable
        self.env = dict(env or {})
        self.env_name = env_name
        self.command = list(command) if command else None
        self.cwd = cwd
        self.startup_timeout = startup_timeout
        self.stop_timeout = stop_timeout
        self.log = log

    def __repr__(self) -> str:
        return f"SubprocessRuntime({self.source or self.command!r})"

    def __call__(self, task: Task) -> AbstractAsyncContextManager[Endpoint]:
        return self._endpoint()

    def argv(self) -> list[str]:
        """The child's command line."""
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


class _Child:
    """One child process: spawn, read its port, pump its output, stop its group."""

    def __init__(self, spec: SubprocessRuntime) -> None:
        self.spec = spec
        self.proc: asyncio.subprocess.Process | None = None
        self.tail: collections.deque[bytes] = collections.deque(maxlen=20)
        self.pumps: list[asyncio.Task[None]] = []
        self.sink: IO[bytes] | None = None

    async def start(self) -> int:
        spec = self.spec
        env = {**os.environ, **spec.env, "PYTHONUNBUFFERED": "1"}
        try:
            self.proc = await asyncio.create_subprocess_exec(
                *spec.argv(),
                stdin=asyncio.subprocess.DEVNULL,
                stdout=asyncio.subprocess.PIPE,
                stderr=asyncio.subprocess.PIPE,
                env=env,
                cwd=spec.cwd,
                start_new_session=True,
            )
        except OSError as exc:
            raise RuntimeLaunchError(f"cannot start {spec.argv()[0]}: {exc}") from exc
        if spec.log is not None:
            self.sink = open(spec.log, "ab")  # noqa: SIM115, ASYNC230 - tiny, closed in stop()
        assert self.proc.stderr is not None
        self.pumps.append(asyncio.create_task(self._pump(self.proc.stderr, b"stderr")))
        try:
            async with asyncio.timeout(spec.startup_timeout):
                port = await self._read_port()
        except TimeoutError:
            raise RuntimeLaunchError(
                self._why(f"no port announced within {spec.startup_timeout:g}s")
            ) from None
        assert self.proc.stdout is not None
        self.pumps.append(asyncio.create_task(self._pump(self.proc.stdout, b"stdout")))
        return port

    async def _read_port(self) -> int:
        assert self.proc is not None and self.proc.stdout is not None
        while True:
            line = await self.proc.stdout.readline()
            if not line:
                await self.proc.wait()
                for task in self.pumps:  # let the stderr tail arrive before quoting it
                    with contextlib.suppress(Exception):
                        await asyncio.wait_for(asyncio.shield(task), 1.0)
                raise RuntimeLaunchError(
                    self._why(f"exited with code {self.proc.returncode} before announcing a port")
                )
            for prefix in PORT_PREFIXES:
                if line.startswith(prefix):
                    try:
                        return int(line[len(prefix) :].strip())
                    except ValueError:
                        raise RuntimeLaunchError(self._why(f"bad port line {line!r}")) from None
            self._emit(b"stdout", line)

    async def _pump(self, stream: asyncio.StreamReader, name: bytes) -> None:
        while line := await stream.readline():
            self._emit(name, line)

    def _emit(self, name: bytes, line: bytes) -> None:
        if name == b"stderr":
            self.tail.append(line)
        if self.sink is not None:
            self.sink.write(line)
        elif log.isEnabledFor(logging.DEBUG):
            pid = self.proc.pid if self.proc else "?"
            log.debug("[%s %s] %s", pid, name.decode(), line.decode(errors="replace").rstrip())

    def _why(self, what: str) -> str:
        argv = " ".join(self.spec.argv())
        tail = b"".join(self.tail).decode(errors="replace").strip()
        return f"{argv}: {what}" + (f"\n--- stderr (last lines) ---\n{tail}" if tail else "")

    async def stop(self) -> None:
        """Terminate the process group, kill it after the grace period; always reap."""
        proc = self.proc
        try:
            if proc is not None and proc.returncode is None:
                _killpg(proc.pid, signal.SIGTERM)
                try:
                    await asyncio.wait_for(proc.wait(), self.spec.stop_timeout)
                except TimeoutError:
                    log.warning(
                        "child %s ignored SIGTERM for %gs; killing",
                        proc.pid,
                        self.spec.stop_timeout,
                    )
        finally:
            if proc is not None:
                _killpg(proc.pid, signal.SIGKILL)  # stragglers in the group, if any
                if proc.returncode is None:
                    await proc.wait()
            for task in self.pumps:
                task.cancel()
            await asyncio.gather(*self.pumps, return_exceptions=True)
            if self.sink is not None:
                self.sink.close()


def _killpg(pid: int, sig: int) -> None:
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(pid, sig)
