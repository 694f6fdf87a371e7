"""Child processes of the runtimes: spawn with pipes, route output lines, stop, reap.

`Child` is one host-side child process led by its own process group: its stdout and
stderr split into lines (of any length: longer ones come in `MAX_LINE` pieces), its
last stderr lines kept for launch errors (`Tail`), its output appended to a log file
or logged at DEBUG, and a served environment's failed shutdown hooks heard from its
stderr. `proctor.serve` writes `PROCTOR_TEARDOWN_ERROR=<pid> <type>: <message>` there
when a shutdown hook raises (a warm sandbox's rollout reports it on its channel
instead); the runtime that stopped the process raises `TeardownError` after its
teardown (`check_teardown`), so the rollout records it in the teardown phase.
"""

from __future__ import annotations

import asyncio
import collections
import contextlib
import ctypes
import logging
import os
import signal
import subprocess
import sys
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import IO, Any

from .._errors import RuntimeLaunchError, TeardownError
from ..serve import SHUTDOWN_FAILED, TEARDOWN_PREFIX
from ._base import exit_cause

__all__ = [
    "LAST_WORDS",
    "MARK",
    "MAX_LINE",
    "REAP",
    "TAIL_LINE",
    "TAIL_LINES",
    "Child",
    "Tail",
    "check_teardown",
    "die_with",
    "killpg",
    "parse_report",
]

MARK = TEARDOWN_PREFIX.encode()
MAX_LINE = 1 << 16  # longer output lines are passed on in pieces of this size
TAIL_LINE = 2000  # characters kept per stderr line quoted in a launch error
TAIL_LINES = 20  # stderr lines quoted in a launch error
LAST_WORDS = 0.5  # seconds a dead child's pipes may still deliver its stderr
REAP = 5.0  # seconds to wait for a killed child to be gone
_PR_SET_PDEATHSIG = 1


def parse_report(line: bytes) -> tuple[int, str]:
    """The pid and the reason of a `MARK` line (pid -1 if unreadable)."""
    pid, _, why = line[len(MARK) :].decode(errors="replace").partition(" ")
    return (int(pid) if pid.isdigit() else -1), why


def check_teardown(why: str | None) -> None:
    """Raise what the environment's shutdown hooks reported, if anything."""
    if why is not None:
        raise TeardownError(SHUTDOWN_FAILED + why)


class Tail:
    """The last stderr lines of a process, quoted in its launch errors."""

    def __init__(self, what: str) -> None:
        self.what = what
        self.lines: collections.deque[bytes] = collections.deque(maxlen=TAIL_LINES)

    def add(self, line: bytes) -> None:
        """Keep one stderr line (cut at `TAIL_LINE`)."""
        self.lines.append(line[:TAIL_LINE])

    def why(self, what: str) -> str:
        """`what` happened to the process, with its last stderr lines."""
        tail = b"\n".join(self.lines).decode(errors="replace").strip()
        return f"{self.what}: {what}" + (f"\n--- stderr (last lines) ---\n{tail}" if tail else "")


class Child(asyncio.SubprocessProtocol):
    """A child process with piped output: lines routed, stderr tail kept, exit watched.

    Subclasses take stdout lines by overriding `stdout` (True: consumed) and a failed
    shutdown report by overriding `torn_down`. `warns` says whether ignoring SIGTERM
    for the whole grace period is logged as a warning.
    """

    warns = True
    dies_as = "environment server"  # what `death` calls it

    def __init__(self, what: str, logger: logging.Logger, sink: str | Path | None) -> None:
        self.tail = Tail(what)
        self.logger = logger
        self.log_path = sink
        self.sink: IO[bytes] | None = None
        self.transport: asyncio.SubprocessTransport | None = None
        self.partial = {1: b"", 2: b""}
        self.exited = asyncio.Event()
        self.drained = asyncio.Event()  # exited and every pipe at EOF
        self.death: asyncio.Future[str] = asyncio.get_running_loop().create_future()
        """Resolves with how it ended when the process exits (for `Endpoint.died`)."""
        self.teardown_error: str | None = None  # what its failed shutdown hooks reported

    @property
    def pid(self) -> int | None:
        """The child's pid (also its process group id), once spawned."""
        return None if self.transport is None else self.transport.get_pid()

    def why(self, what: str) -> str:
        """A launch error's message: `what` happened, with the last stderr lines."""
        return self.tail.why(what)

    async def spawn(
        self,
        argv: list[str],
        *,
        stdin: int = subprocess.DEVNULL,
        pass_fds: tuple[int, ...] = (),
        env: Mapping[str, str] | None = None,
        cwd: str | Path | None = None,
        die_with_us: bool = False,
    ) -> None:
        """Start `argv` in a new session, its stdout and stderr piped to us.

        Raises:
            RuntimeLaunchError: the log file cannot be opened or `argv` cannot start.
        """
        if self.log_path is not None:
            try:
                self.sink = open(self.log_path, "ab")  # noqa: SIM115, ASYNC230 - closed in stop()
            except OSError as exc:
                raise RuntimeLaunchError(f"cannot open log file {self.log_path}: {exc}") from exc
        loop = asyncio.get_running_loop()
        extra: dict[str, Any] = {"preexec_fn": die_with(os.getpid())} if die_with_us else {}
        try:
            self.transport, _ = await loop.subprocess_exec(
                lambda: self, *argv, stdin=stdin, stdout=subprocess.PIPE,
                stderr=subprocess.PIPE, pass_fds=pass_fds, env=env, cwd=cwd,
                start_new_session=True, **extra,
            )  # fmt: skip
        except OSError as exc:
            raise RuntimeLaunchError(self.why(f"cannot start {argv[0]}: {exc}")) from exc

    def stdout(self, line: bytes) -> bool:
        """One stdout line; True if it was consumed (not to be logged)."""
        return False

    def torn_down(self, pid: int, why: str) -> None:
        """The process `pid` reported failed shutdown hooks on our stderr."""
        self.teardown_error = why

    def line(self, fd: int, line: bytes) -> None:
        """One line of the child's output (without its newline)."""
        if fd == 1 and self.stdout(line):
            return
        if fd == 2:
            if line.startswith(MARK):
                self.torn_down(*parse_report(line))
            self.tail.add(line)
        if self.sink is not None:
            self.sink.write(line + b"\n")
        elif self.logger.isEnabledFor(logging.DEBUG):
            name = "stdout" if fd == 1 else "stderr"
            what = self.tail.what
            self.logger.debug("[%s %s %s] %s", what, self.pid, name, line.decode(errors="replace"))

    def terminate(self) -> None:
        """Ask the child to stop (SIGTERM to its group)."""
        if self.pid is not None:
            killpg(self.pid, signal.SIGTERM)

    def kill(self) -> None:
        """SIGKILL the child's group (the child, if it lingers, and any stragglers)."""
        if self.pid is not None:
            killpg(self.pid, signal.SIGKILL)

    async def stop(self, grace: float) -> None:
        """Terminate the child, kill its group after `grace`; always reap.

        Exit is judged by the process itself, not by its pipes: a grandchild that holds
        them open must not make a clean exit look like a hang.
        """
        transport, pid = self.transport, self.pid
        try:
            if transport is not None and pid is not None and not self.exited.is_set():
                self.terminate()
                try:
                    await asyncio.wait_for(self.exited.wait(), grace)
                except TimeoutError:
                    if self.warns:
                        self.logger.warning("child %s ignored SIGTERM for %gs; killing", pid, grace)
        finally:
            if transport is not None and pid is not None:
                self.kill()
                # Reaped by the child watcher; closing first would race it for the pid.
                # Then its last output, unless something outside the group holds the pipes.
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(self.exited.wait(), REAP)
                    await asyncio.wait_for(self.drained.wait(), LAST_WORDS)
                transport.close()
            if self.sink is not None:
                self.sink.close()

    async def first(self, fut: asyncio.Future[Any], timeout: float) -> Any:  # noqa: ASYNC109
        """`fut`'s result, unless this process exits or `timeout` passes first.

        Raises:
            RuntimeLaunchError: it exited or stayed silent (its last stderr lines quoted).
        """
        exited = asyncio.ensure_future(self.exited.wait())
        try:
            done, _ = await asyncio.wait(
                [fut, exited], timeout=timeout, return_when=asyncio.FIRST_COMPLETED
            )
        finally:
            exited.cancel()
        if fut in done:
            return fut.result()
        if not done:
            raise RuntimeLaunchError(self.why(f"not ready within {timeout:g}s"))
        raise await self.died()

    async def died(self) -> RuntimeLaunchError:
        """The error for a process that exited before it was ready, once its output is in."""
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(self.drained.wait(), LAST_WORDS)
        return RuntimeLaunchError(
            self.why(f"exited with code {self.returncode} before it was ready")
        )

    @property
    def returncode(self) -> int | None:
        """The child's exit code, once it exited."""
        return None if self.transport is None else self.transport.get_returncode()

    # -- protocol: split the output into lines (of any length) and report the exit --

    def pipe_data_received(self, fd: int, data: bytes) -> None:
        *lines, rest = (self.partial[fd] + data).split(b"\n")
        if len(rest) > MAX_LINE:  # no newline in sight: pass it on in pieces
            lines.append(rest)
            rest = b""
        self.partial[fd] = rest
        for line in lines:
            self.line(fd, line)

    def pipe_connection_lost(self, fd: int, exc: Exception | None) -> None:
        rest, self.partial[fd] = self.partial.get(fd, b""), b""
        if rest:
            self.line(fd, rest)

    def process_exited(self) -> None:
        self.exited.set()
        if not self.death.done():
            self.death.set_result(exit_cause(self.dies_as, self.returncode))

    def connection_lost(self, exc: Exception | None) -> None:
        self.drained.set()


def die_with(parent: int) -> Callable[[], None] | None:
    """A `preexec_fn` giving the child SIGTERM when `parent` dies (PR_SET_PDEATHSIG).

    The kernel sends it when the *thread* that forked exits: here the event loop's, which
    outlives every child it started (each is stopped before its rollout ends). Linux
    only (elsewhere None: no such signal).
    """
    if sys.platform != "linux":
        return None
    prctl = ctypes.CDLL(None, use_errno=True).prctl  # resolved before the fork

    def preexec() -> None:
        prctl(_PR_SET_PDEATHSIG, signal.SIGTERM, 0, 0, 0)
        if os.getppid() != parent:  # it died before the signal was armed
            os.kill(os.getpid(), signal.SIGTERM)

    return preexec


def killpg(pid: int, sig: int) -> None:
    """Signal a process group, if it is still there and ours to signal."""
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(pid, sig)
