"""`SubprocessRuntime`: one child `python -m proctor.serve` per rollout."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import secrets
import socket
import sys
from collections.abc import AsyncIterator, Iterable, Mapping, Sequence
from contextlib import AbstractAsyncContextManager
from pathlib import Path
from typing import TYPE_CHECKING

from .._environ import allowed_environ
from .._errors import RuntimeLaunchError
from .._resource import AsyncResource
from ._base import Endpoint, Runtime
from ._isolate import INNER_PID
from ._isolation import harden_driver, isolated
from ._process import LAST_WORDS, Child, check_teardown
from ._warm import Forked, request

if TYPE_CHECKING:
    from ..records import Task

__all__ = ["SubprocessRuntime"]

log = logging.getLogger("proctor.runtimes.subprocess")

PORT_PREFIXES = (b"PROCTOR_SERVE_PORT=", b"HUD_SERVE_PORT=")
TOKEN_ENV = "PROCTOR_TOKEN"  # the child's environment variable holding its token
_READY = b"READY"  # what a zygote prints once loaded (`_zygote.READY`)
_INNER = INNER_PID.encode()


class SubprocessRuntime(Runtime, AsyncResource):
    """Serve each rollout's environment in its own child process.

    The child runs `python -m proctor.serve SOURCE` (or `command`), and the first
    stdout line starting with `PROCTOR_SERVE_PORT=` or `HUD_SERVE_PORT=` gives the
    port. Other output goes to `log` (a file path) or the `proctor.runtimes.subprocess`
    logger at DEBUG. The child leads its own process group, which is terminated (then
    killed after `stop_timeout`) on exit; if this process dies first, the child gets
    SIGTERM (a parent-death signal, on Linux).

    Walls (Linux): the child, and all it runs (task code, graders, hooks, shell
    commands, a foreign server `command`), has its own pid, mount and IPC namespaces,
    with a private /proc (the driver and other rollouts are not in it), /tmp, /dev/shm
    and HOME (`/tmp/home`, also the working folder unless `cwd` is given). As root it
    runs as a fresh uid without capabilities: it reads only what everybody may read,
    plus its source's folder (bound read-only, owned by it when closed to others); the
    folders that others cannot pass on the way to its interpreter or source (`/root`)
    are hidden but for those. As another user, an unprivileged user namespace (which the
    kernel must allow) and no capabilities; the driver is then non-dumpable, so no
    process of its uid can read its environment or memory. Everything behind the
    walls ends when the server exits. See `_isolate` for the details.

    Each rollout's server requires a fresh token (returned in the `Endpoint`), so other
    local users cannot use its loopback port. A cold child reads it from
    `$PROCTOR_TOKEN` (`proctor.serve --token-env PROCTOR_TOKEN`, which removes it from
    its environment once read); a custom `command` gets the same variable and should
    require it. A warm child gets its token from the runtime on its own channel, never
    through the zygote.

    Warm pool (`warm=N`, Linux): N zygote processes each import proctor and `source`
    once; each rollout's child is forked from one of them on request (a few ms, where
    a fresh interpreter serving costs ~100, asyncio ~40 of it), runs the initialize hooks,
    serves on its own port and exits when the rollout ends: a fresh process and fresh
    state per rollout, walled from the others (its own user, pid and mount namespaces:
    private /proc, /tmp and HOME; it is pid 1 there, so signals it sends itself are
    ignored). The zygotes start on first use (or on `async with`) and stop on
    `aclose()` or when this process exits; a zygote that dies is restarted on the next
    request, and a fork it lost is retried once. A child that dies fails its rollout
    (the connection drops), not the others. One zygote forks a few hundred children a
    second; more help only on machines with many cores.

    What a source may do at import time when warm, since every child inherits the
    zygote's memory: define the environment, import modules, read files, compute
    constants. Not: start threads or thread pools (the zygote refuses to start with
    more than one thread, native ones included; BLAS libraries need
    `OMP_NUM_THREADS=1`), open sockets, connections or clients (they would be shared
    by every child), start processes or an event loop, or seed per-rollout state such
    as `numpy.random` (Python's `random` is reseeded in each child). Do those in an
    initialize hook, which runs in each child.

    Args:
        source: Python file or folder defining the environment.
        python: interpreter for the child (default: this one).
        env: variables for the child. It gets none of this process's others but
            those of `proctor._environ.SAFE` (PATH, HOME, LANG, PYTHONPATH, ...) and
            `pass_env`: provider keys and tokens stay in the driver, out of reach of the
            environment's code and the commands an agent runs in its shell.
        pass_env: names of more variables of this process to pass on (when set).
        env_name: which environment to serve when the source defines several.
        command: a full command instead of `python -m proctor.serve SOURCE`.
        cwd: working directory of the child (a relative `source` is relative to it);
            by default its private HOME.
        startup_timeout: seconds to wait for the port line.
        stop_timeout: seconds between SIGTERM and SIGKILL.
        log: file the child's other output is appended to.
        warm: fork each child from one of this many zygotes (`True` is 1; `False`
            or 0 spawns a fresh interpreter per rollout).

    Raises:
        ValueError: neither source nor command, a warm runtime given a command, or
            a negative `warm`.
    """

    def __init__(
        self,
        source: str | Path | None = None,
        *,
        python: str | None = None,
        env: Mapping[str, str] | None = None,
        pass_env: Iterable[str] = (),
        env_name: str | None = None,
        command: Sequence[str] | None = None,
        cwd: str | Path | None = None,
        startup_timeout: float = 60.0,
        stop_timeout: float = 5.0,
        log: str | Path | None = None,
        warm: bool | int = False,
    ) -> None:
        if source is None and command is None:
            raise ValueError("SubprocessRuntime needs a source or a command")
        if warm < 0:
            raise ValueError(f"warm must be a number of zygotes (>= 0), not {warm}")
        if warm and command is not None:
            raise ValueError("a warm runtime forks proctor's own server; it takes no command")
        self.source = source
        self.python = python or sys.executable
        self.env = dict(env or {})
        self.pass_env = frozenset(pass_env)
        self.env_name = env_name
        self.command = list(command) if command else None
        self.cwd = cwd
        self.startup_timeout = startup_timeout
        self.stop_timeout = stop_timeout
        self.log = log
        self.warm = int(warm)
        self._pool: _WarmPool | None = None

    def __repr__(self) -> str:
        warm = f", warm={self.warm}" if self.warm else ""
        return f"SubprocessRuntime({self.source or self.command!r}{warm})"

    def __call__(self, task: Task) -> AbstractAsyncContextManager[Endpoint]:
        return self._forked() if self.warm else self._endpoint()

    async def start(self) -> None:
        """Start a warm runtime's zygote now rather than at the first rollout."""
        if self.warm:
            await self._warm_pool().start()

    async def aclose(self) -> None:
        """Stop a warm runtime's zygotes and any child still serving."""
        pool, self._pool = self._pool, None
        if pool is None:
            return
        if pool.loop is asyncio.get_running_loop():
            await pool.aclose()
        else:
            pool.abandon()

    def argv(self) -> list[str]:
        """The child's command line (a cold runtime's), before its walls (`isolated`)."""
        if self.command is not None:
            return self.command
        argv = [self.python, "-m", "proctor.serve", self.source_path(), "--token-env", TOKEN_ENV]
        return [*argv, "--env", self.env_name] if self.env_name else argv

    def source_path(self) -> str:
        """The source's absolute path (a relative one is relative to `cwd`, if given)."""
        return os.path.join(os.path.abspath(self.cwd or "."), str(self.source))

    @contextlib.asynccontextmanager
    async def _endpoint(self) -> AsyncIterator[Endpoint]:
        token = secrets.token_urlsafe(32)
        child = _Child(self, {TOKEN_ENV: token})
        try:
            port = await child.start()
            yield Endpoint(f"tcp://127.0.0.1:{port}", token=token, died=child.death)
        finally:
            await child.stop()
        check_teardown(child.teardown_error)

    @contextlib.asynccontextmanager
    async def _forked(self) -> AsyncIterator[Endpoint]:
        child, port = await self._warm_pool().fork()
        try:
            yield Endpoint(f"tcp://127.0.0.1:{port}", token=child.token, died=child.death)
        finally:
            if child.gone.is_set():
                log.warning("environment process %s died during its rollout", child.host_pid)
            await child.stop(self.stop_timeout)
        check_teardown(child.teardown_error)

    def _warm_pool(self) -> _WarmPool:
        """This loop's pool (one used on a loop that is gone is abandoned)."""
        pool = self._pool
        if pool is None or pool.loop is not asyncio.get_running_loop():
            if pool is not None:
                pool.abandon()
            pool = self._pool = _WarmPool(self, self.warm)
        return pool


class _Child(Child):
    """One child process: spawn it, read its port, stop its group."""

    def __init__(self, spec: SubprocessRuntime, env: Mapping[str, str] | None = None) -> None:
        super().__init__("", log, spec.log)
        self.spec = spec
        self.env = dict(env or {})
        self.port: asyncio.Future[int] = asyncio.get_running_loop().create_future()
        self.inner_pid: int | None = None

    pass_fds: tuple[int, ...] = ()
    announces = "a port"
    linger = False  # the walls stand until every process behind them is gone

    def argv(self) -> list[str]:
        """The command line this process runs."""
        return self.spec.argv()

    async def start(self) -> int:
        """Spawn the child and wait for its port line.

        Raises:
            RuntimeLaunchError: it cannot be spawned, exits first, or stays silent too long.
        """
        spec = self.spec
        argv = self.argv()
        self.tail.what = " ".join(argv)
        keep = [spec.python]
        if spec.source is not None:
            keep.append(spec.source_path())
        env = {**allowed_environ(spec.pass_env), **spec.env, **self.env, "PYTHONUNBUFFERED": "1"}
        keep += [p for p in env.get("PYTHONPATH", "").split(os.pathsep) if p]
        harden_driver()
        argv = isolated(argv, cwd=spec.cwd, keep=keep, linger=self.linger)
        await self.spawn(argv, pass_fds=self.pass_fds, env=env, cwd=spec.cwd, die_with_us=True)
        try:
            async with asyncio.timeout(spec.startup_timeout):
                return await self.port
        except TimeoutError:
            raise RuntimeLaunchError(
                self.why(f"no port announced within {spec.startup_timeout:g}s")
            ) from None

    def stdout(self, line: bytes) -> bool:
        if self.port.done() or not line.startswith(PORT_PREFIXES):
            return False
        value = line.partition(b"=")[2].strip()
        if value.isdigit() and 0 < int(value) < 65536:
            self.port.set_result(int(value))
        else:
            self.port.set_exception(RuntimeLaunchError(self.why(f"bad port line {line!r}")))
        return True

    def line(self, fd: int, line: bytes) -> None:
        if fd == 2 and line.startswith(_INNER) and line[len(_INNER) :].isdigit():
            self.inner_pid = int(line[len(_INNER) :])  # the server's pid behind its walls
            return
        super().line(fd, line)

    def torn_down(self, pid: int, why: str) -> None:
        if pid == self.inner_pid:
            self.teardown_error = why

    def process_exited(self) -> None:
        """The child is gone; fail a pending start once its last output had a moment."""
        super().process_exited()
        asyncio.get_running_loop().call_later(LAST_WORDS, self.no_port)

    def connection_lost(self, exc: Exception | None) -> None:
        super().connection_lost(exc)
        self.no_port()  # exited and every pipe closed: no more output is coming

    def no_port(self) -> None:
        """Fail a pending start: the child exited (or closed its output) without a port."""
        if not self.port.done():
            why = f"exited with code {self.returncode} before announcing {self.announces}"
            self.port.set_exception(RuntimeLaunchError(self.why(why)))

    async def stop(self, grace: float | None = None) -> None:
        """Terminate the process group, kill it after `stop_timeout`; always reap."""
        if not self.port.done():  # stopped while starting: nobody awaits the port now
            self.port.cancel()
        elif not self.port.cancelled():
            self.port.exception()  # a launch failure already raised; mark it retrieved
        await super().stop(self.spec.stop_timeout if grace is None else grace)


class _ZygoteGone(RuntimeLaunchError):
    """The zygote died before forking for this request: worth one retry on a new one."""


class _WarmPool:
    """A warm runtime's zygotes, (re)started on demand, and its children's lifeline.

    Bound to the event loop it was made on. Requests go round-robin over the zygotes;
    one that died is replaced on its next request, and a fork it lost is retried once.
    """

    def __init__(self, spec: SubprocessRuntime, size: int) -> None:
        self.spec = spec
        self.loop = asyncio.get_running_loop()
        self.zygotes: list[_Zygote | None] = [None] * size
        self.locks = [asyncio.Lock() for _ in range(size)]
        self.turn = 0
        self.retired: list[_Zygote] = []
        # Children stop when the write end closes: on aclose(), or when this process dies.
        self.lifeline, self._lifeline_w = os.pipe()

    async def start(self) -> None:
        """Start every zygote that is not running.

        Raises:
            RuntimeLaunchError: a zygote could not be started.
        """
        try:
            async with asyncio.TaskGroup() as tg:
                for slot in range(len(self.zygotes)):
                    tg.create_task(self.zygote(slot))
        except BaseExceptionGroup as group:
            raise group.exceptions[0] from None

    async def fork(self) -> tuple[Forked, int]:
        """A served child and its port from the next zygote, restarting it once if it died.

        Raises:
            RuntimeLaunchError: no zygote could be started or the child failed to serve.
        """
        slot, self.turn = self.turn, (self.turn + 1) % len(self.zygotes)
        try:
            return await (await self.zygote(slot)).fork()
        except _ZygoteGone as exc:
            log.warning("warm-pool zygote died; restarting it: %s", exc)
        return await (await self.zygote(slot)).fork()

    async def zygote(self, slot: int) -> _Zygote:
        """The running zygote of `slot`, started (or restarted) if need be."""
        zygote = self.zygotes[slot]
        if zygote is not None and zygote.alive:
            return zygote
        async with self.locks[slot]:
            zygote = self.zygotes[slot]
            if zygote is not None and zygote.alive:
                return zygote
            if zygote is not None:
                await self.retire(zygote)
            zygote = self.zygotes[slot] = _Zygote(self.spec, self.lifeline)
            try:
                await zygote.start()
            except BaseException:
                self.zygotes[slot] = None
                await zygote.stop()
                raise
            return zygote

    async def retire(self, zygote: _Zygote) -> None:
        """Put a dead zygote aside; stop the retired ones whose children are all gone.

        Its orphaned children keep serving their rollouts, and their output still
        flows through its pipes: closing those now would break their writes.
        """
        zygote.close_ctl()
        done = [z for z in self.retired if z.drained.is_set()]
        self.retired = [z for z in self.retired if not z.drained.is_set()] + [zygote]
        for old in done:
            await old.stop()

    async def aclose(self) -> None:
        """Tell every child to stop, then stop every zygote."""
        self.close_lifeline()
        zygotes, self.retired = [*self.retired, *self.zygotes], []
        try:
            for zygote in zygotes:
                if zygote is not None:
                    await zygote.stop()
        finally:
            os.close(self.lifeline)

    def abandon(self) -> None:
        """Stop it from outside its (gone) event loop: children and zygotes exit on EOF."""
        self.close_lifeline()
        for zygote in [*self.retired, *self.zygotes]:
            if zygote is not None:
                zygote.ctl.close()
        os.close(self.lifeline)

    def close_lifeline(self) -> None:
        if self._lifeline_w >= 0:
            os.close(self._lifeline_w)
            self._lifeline_w = -1


class _Zygote(_Child):
    """A zygote process (see `_zygote`): forks a served child per `fork()` call.

    Reuses `_Child` for spawning, output routing and stopping; it prints `READY` on
    stdout where a server prints its port, then reads requests on its control socket.
    """

    announces = "READY"
    linger = True  # its children serve on when it dies

    def __init__(self, spec: SubprocessRuntime, lifeline: int) -> None:
        super().__init__(spec)
        self.ctl, self._theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
        self.ctl.setblocking(False)
        self.pass_fds = (self._theirs.fileno(), lifeline)

    def argv(self) -> list[str]:
        spec = self.spec
        ctl, lifeline = self.pass_fds
        argv = [spec.python, "-m", "proctor.runtimes._zygote", spec.source_path()]
        argv += ["--ctl", str(ctl), "--lifeline", str(lifeline)]
        return [*argv, "--env", spec.env_name] if spec.env_name else argv

    @property
    def alive(self) -> bool:
        """Whether the zygote can still fork."""
        ready = self.port.done() and not self.port.cancelled() and not self.port.exception()
        return ready and not self.exited.is_set() and self.ctl.fileno() != -1

    def stdout(self, line: bytes) -> bool:
        if line != _READY or self.port.done():
            return super().stdout(line)
        self.port.set_result(0)
        return True

    def torn_down(self, pid: int, why: str) -> None:
        pass  # its children's reports come on their own channels

    async def start(self) -> int:
        try:
            return await super().start()
        finally:
            self._theirs.close()

    async def fork(self) -> tuple[Forked, int]:
        """Fork a served child and wait until it listens: the child and its port.

        Raises:
            _ZygoteGone: the zygote died before it forked for us.
            RuntimeLaunchError: the child failed to serve, or took too long.
        """
        if not self.alive:
            raise _ZygoteGone(self.why("the zygote is not running"))
        try:
            child = request(self.ctl, {}, self.why, lost=_ZygoteGone, logger=log)
        except _ZygoteGone:
            self.close_ctl()  # not alive any more: the pool replaces it
            raise
        try:
            port = await child.ready(self.spec.startup_timeout)
        except BaseException as exc:
            if isinstance(exc, _ZygoteGone):  # before its exit is seen: no more requests
                self.close_ctl()
            await child.stop(self.spec.stop_timeout)
            raise
        if port is None:
            await child.stop(self.spec.stop_timeout)
            raise RuntimeLaunchError(self.why("forked child announced no port"))
        return child, port

    def close_ctl(self) -> None:
        """Stop talking to the zygote (it exits when it reads EOF)."""
        self.ctl.close()

    async def stop(self, grace: float | None = None) -> None:
        """Close the control socket (the zygote exits on EOF), then reap it."""
        self.close_ctl()
        self._theirs.close()
        if self.transport is not None and not self.exited.is_set():
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self.exited.wait(), self.spec.stop_timeout)
        await super().stop(grace)
