"""`SandboxRuntime`: each rollout's environment inside a bubblewrap (`bwrap`) sandbox.

The sandbox is `bwrap --unshare-all --die-with-parent --cap-drop ALL --new-session` with
read-only binds of the system (`/usr`, `/etc`, the `/bin`, `/lib*` links) and of the
Python environment (the interpreter's prefixes, every `sys.path` entry, the folder of the
environment's source); a private tmpfs work directory (`/sandbox`, also `HOME` and the
working directory), a tmpfs `/tmp` and `/dev/shm`; a fresh `/proc` and `/dev`; an emptied
environment (`--clearenv`, then `PATH`, `HOME`, `TMPDIR`, `LANG` and the runtime's `env`);
and uid/gid 65534 inside. Nothing else of the host's files is visible.

A non-root uid on the host, too: when proctor runs as root, bwrap itself runs as a uid
of the runtime's own (`host_uid`, drawn from `HOST_UIDS`: no account, no other process),
so that the sandbox cannot read root's files through what is bound (a root-run bwrap
maps even `--uid 65534` to host root), so that the process limit holds (the kernel
exempts root from it), and so that no other process on the host owns the sandbox's
user namespace: one that did (any daemon running as nobody, say) could ptrace the
sandbox or open its files and sockets through /proc/PID/root. Paths that uid cannot
traverse (the Python under `/root`, a source folder under a private directory) are
first bound, by root, into a private mount namespace held by a small helper process,
and bwrap (entered into it with `nsenter`) binds them from there. Run as another user,
bwrap runs as that user.

Network: `network="none"` gives the sandbox its own network namespace with only `lo`; the
control channel then listens on a Unix socket bound into the sandbox from a host folder,
and the endpoint is `unix:///path`. `network="host"` keeps the host's network; the
server listens on a loopback port (`tcp://127.0.0.1:port`), and every loopback port of
the host (other rollouts' servers and capabilities included) is reachable from the
sandbox and the other way round: isolation between rollouts needs `network="none"`.
Capabilities (the shell of `env.add_shell`, ...) work in both modes through
`run.binding(name)`: the client tunnels them over the control connection and the server
dials them on its own loopback. Their raw manifest URLs are reachable from the host only
with `network="host"`.

Limits, per runtime (`limits=`, over the defaults) and per task
(`runtime_config={"limits": {...}}`, key by key over the runtime's; `None` lifts one),
applied before the source is loaded: `memory` (bytes or "512M": address space per
process, RLIMIT_AS; default 2G), `processes` (processes and threads of the sandbox user
within this sandbox, RLIMIT_NPROC: a fork bomb stops there; default 256), `file_size`
(largest file a process may write, RLIMIT_FSIZE; default 1G), `tmpfs` (size of each of
`/tmp`, `/sandbox` and `/dev/shm`: writes past it fail with ENOSPC; default 512M),
`cpu_time` (CPU seconds per process, RLIMIT_CPU; default none) and `wall_time` (seconds
from start until the whole sandbox is killed; the rollout then fails at its next call
into the environment, so bound the rollout itself with `Timeouts`; default none). A
sandbox cannot create user namespaces (which would let it mount an uncapped tmpfs).
cgroups are not used: this runtime must work with unprivileged bwrap and hosts without
a delegated cgroup v2 tree, so memory is per process, not per sandbox.

Control channel: every rollout's server requires a fresh token, returned in the
`Endpoint` and handed to the server through a pipe (cold) or the rollout's own channel
(warm), never argv or the environment: the sandbox user, and for `network="host"` every
local user, could otherwise reach its socket or port.

Teardown: the server is the first process of the sandbox's pid namespace; SIGTERM runs
its shutdown hooks, SIGKILL after `stop_timeout` ends it, and the kernel then kills
every other process in the namespace. A dead parent takes the sandbox with it
(`--die-with-parent`), and the runtime's host folder (`proctor-sandbox-PID-START-*`)
is removed by the next runtime to start, or by `SandboxRuntime.reconcile()`.

`warm=True`: one sandbox runs a zygote that loaded the source once; each rollout is a
child forked from it that then unshares its own user, mount, pid, IPC, UTS and cgroup
namespaces (and network, for `network="none"`) before any task code runs, mounts its own
`/proc`, `/tmp`, `/dev/shm` and `/sandbox`, hides the other rollouts' sockets, drops
every capability and sets its limits. So a warm rollout sees the same files, processes,
network and limits as a cold one, and nothing of the others. What warm rollouts share:
the zygote's memory as of the fork (whatever the source did at import time; sources must
not start threads or open connections at import), the sandbox uid, and the read-only
binds. A rollout cannot reach the zygote: its channel is closed in the child.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import os
import secrets
import shutil
import sys
import tempfile
from collections.abc import AsyncIterator, Callable, Iterable, Mapping
from contextlib import AbstractAsyncContextManager
from pathlib import Path
from typing import TYPE_CHECKING, Any

from .._resource import AsyncResource
from ._base import Endpoint, Runtime
from ._process import check_teardown
from ._sandbox_host import (
    _ENTRY,
    CONTROL_DIR,
    Network,
    _Cold,
    _Host,
    _host_uid,
    _reconcile,
    _Zygote,
    _ZygoteGone,
)
from ._sandbox_limits import DEFAULT_LIMITS
from ._sandbox_limits import _Limits as _Limits  # batch config checks its limits with it

if TYPE_CHECKING:
    from ..records import Task
    from ._warm import Forked

__all__ = ["SandboxRuntime"]

log = logging.getLogger("proctor.runtimes.sandbox")


class SandboxRuntime(Runtime, AsyncResource):
    """Serve each rollout's environment inside a bubblewrap sandbox (see the module doc).

    Args:
        source: Python file or folder defining the environment; its folder is bound
            read-only into the sandbox.
        env_name: which environment to serve when the source defines several.
        network: `"none"` (own network namespace, Unix-socket endpoint) or `"host"`.
        warm: fork each rollout from a zygote in one sandbox (a few ms instead of a
            fresh interpreter's hundreds); each rollout still gets its own namespaces.
            The zygote starts on first use and stops on `aclose()` (or `async with`).
        python: interpreter inside the sandbox (default: this one); proctor must be
            importable by it.
        env: environment variables set inside the sandbox (nothing else is inherited).
        binds: more host paths bound read-only, at the same path.
        writable: host folders bound read-write, at the same path (shared by every
            rollout; the sandbox user, `host_uid` when proctor runs as root, must be
            allowed to write there: make them writable by others, or chown them).
        limits: resource limits over `DEFAULT_LIMITS` (`memory` 2G, `processes` 256,
            `file_size` 1G, `tmpfs` 512M each, `cpu_time` and `wall_time` unset; see
            the module doc); a task's `runtime_config["limits"]` overrides them key by
            key, and `None` lifts a limit.
        startup_timeout: seconds to wait for the environment to serve.
        stop_timeout: seconds between SIGTERM and SIGKILL.
        log: file the sandbox's output is appended to (default: the
            `proctor.runtimes.sandbox` logger at DEBUG).
        bwrap: the bubblewrap executable.

    Raises:
        ValueError: bad `network` or `limits`.
    """

    def __init__(
        self,
        source: str | Path,
        *,
        env_name: str | None = None,
        network: Network = "none",
        warm: bool = False,
        python: str | None = None,
        env: Mapping[str, str] | None = None,
        binds: Iterable[str | Path] = (),
        writable: Iterable[str | Path] = (),
        limits: Mapping[str, Any] | None = None,
        startup_timeout: float = 60.0,
        stop_timeout: float = 5.0,
        log: str | Path | None = None,
        bwrap: str = "bwrap",
    ) -> None:
        if network not in ("none", "host"):
            raise ValueError(f"network must be 'none' or 'host', not {network!r}")
        self.source = Path(source).absolute()
        self.env_name = env_name
        self.network: Network = network
        self.warm = warm
        found = shutil.which(python) if python else sys.executable
        if not found:
            raise ValueError(f"python interpreter {python!r} not found")
        self.python = found
        self.host_uid = _host_uid()
        """The sandboxes' uid (and gid) on the host."""
        self.env = dict(env or {})
        self.binds = [Path(p).absolute() for p in binds]
        self.writable = [Path(p).absolute() for p in writable]
        self._limit_spec = {**DEFAULT_LIMITS, **(limits or {})}
        self.limits = _Limits.parse(self._limit_spec, "limits")
        self.startup_timeout = startup_timeout
        self.stop_timeout = stop_timeout
        self.log = log
        self.bwrap = bwrap
        self._host: _Host | None = None
        self._zygote: _Zygote | None = None
        self._lock: tuple[asyncio.AbstractEventLoop, asyncio.Lock] | None = None

    def __repr__(self) -> str:
        return f"SandboxRuntime({str(self.source)!r}, network={self.network!r}, warm={self.warm})"

    def __call__(self, task: Task) -> AbstractAsyncContextManager[Endpoint]:
        return self._forked(task) if self.warm else self._cold(task)

    async def start(self) -> None:
        """Prepare the host side now (and a warm runtime's zygote) rather than at the
        first rollout."""
        if self.warm:
            await self._warm_zygote()
        else:
            await self._prepared()

    @classmethod
    def reconcile(cls, tmpdir: str | Path | None = None) -> list[Path]:
        """Remove the host folders of runtimes whose process is gone (killed, say).

        Each runtime's folder (`proctor-sandbox-PID-START-*` in `tmpdir`, by default
        the system's) names its owner's pid and start time, so a reused pid is not
        taken for it. Only folders of this user are touched. Every runtime does this
        when it starts. Returns the folders removed.
        """
        return _reconcile(tmpdir if tmpdir is not None else tempfile.gettempdir())

    async def aclose(self) -> None:
        """Stop the zygote and the mount helper and remove the runtime's host folder."""
        zygote, self._zygote = self._zygote, None
        host, self._host = self._host, None
        try:
            if zygote is not None:
                await zygote.stop()
        finally:
            if host is not None:
                await host.close()

    # -- rollouts -----------------------------------------------------------------------

    @contextlib.asynccontextmanager
    async def _cold(self, task: Task) -> AsyncIterator[Endpoint]:
        limits = self._limits_for(task)
        host = await self._prepared()
        command = [self.python, "-m", _ENTRY, "serve", str(self.source)]
        command += ["--limits", json.dumps(limits.inside())]
        if self.env_name:
            command += ["--env", self.env_name]
        if self.network == "none":
            command += ["--unix", f"{CONTROL_DIR}/ctl.sock"]
        sandbox = _Cold(self)
        ctl = host.control_dir() if self.network == "none" else None
        token = secrets.token_urlsafe(32)
        info_r, info_w = os.pipe()
        token_r, token_w = os.pipe()  # the token goes in by a pipe: never argv or environ
        try:
            os.write(token_w, token.encode())
            os.close(token_w)
            token_w = -1
            command += ["--token-fd", str(token_r)]
            argv = host.argv(command, ctl=ctl, tmpfs=limits.tmpfs, info_fd=info_w)
            await sandbox.proc.spawn(argv, pass_fds=(info_w, token_r))
            for fd in (info_w, token_r):
                os.close(fd)
            info_w = token_r = -1
            url = await sandbox.ready(info_r, None if ctl is None else ctl / "ctl.sock")
            died = sandbox.proc.death
            entry = None if sandbox.pid is None else host.entry(sandbox.pid, limits.inside())
            with _deadline(limits.wall_time, sandbox.kill, died):
                yield Endpoint(url, token=token, died=died, entry=entry)
        finally:
            for fd in (info_r, info_w, token_r, token_w):
                if fd >= 0:
                    os.close(fd)
            try:
                await sandbox.stop()
            finally:
                if ctl is not None:
                    shutil.rmtree(ctl, ignore_errors=True)
        check_teardown(sandbox.proc.teardown_error)

    @contextlib.asynccontextmanager
    async def _forked(self, task: Task) -> AsyncIterator[Endpoint]:
        limits = self._limits_for(task)
        try:
            child, path, port = await self._fork(limits)
        except _ZygoteGone as exc:  # it died before its exit was seen: once more, anew
            log.warning("sandbox zygote died; restarting it: %s", exc)
            child, path, port = await self._fork(limits)
        try:
            url = f"tcp://127.0.0.1:{port}" if path is None else f"unix://{path}"
            with _deadline(limits.wall_time, child.kill, child.death):
                yield Endpoint(url, token=child.token, died=child.death)
        finally:
            try:
                await child.stop(self.stop_timeout)
            finally:
                if path is not None:
                    with contextlib.suppress(FileNotFoundError):
                        path.unlink()
        check_teardown(child.teardown_error)

    async def _fork(self, limits: _Limits) -> tuple[Forked, Path | None, int | None]:
        """A child of the running zygote (started if need be), ready: it, its socket's
        host path (network "none") and its port."""
        zygote = await self._warm_zygote()
        child, path = zygote.fork(limits)
        try:
            port = await child.ready(self.startup_timeout)
        except BaseException as exc:
            if isinstance(exc, _ZygoteGone):
                zygote.ready = False
            await child.stop(self.stop_timeout)
            if path is not None:
                with contextlib.suppress(FileNotFoundError):
                    path.unlink()
            raise
        return child, path, port

    def _limits_for(self, task: Task) -> _Limits:
        given = (task.runtime_config or {}).get("limits") or {}
        if not isinstance(given, Mapping):
            raise ValueError(f"runtime_config.limits: expected a mapping, got {given!r}")
        return _Limits.parse({**self._limit_spec, **given}, "runtime_config.limits")

    # -- shared state -----------------------------------------------------------------------

    def _loop_lock(self) -> asyncio.Lock:
        loop = asyncio.get_running_loop()
        if self._lock is None or self._lock[0] is not loop:
            self._lock = (loop, asyncio.Lock())
        return self._lock[1]

    async def _prepared(self) -> _Host:
        if self._host is not None and self._host.usable:
            return self._host
        async with self._loop_lock():
            if self._host is None or not self._host.usable:
                if self._host is not None:
                    await self._host.close()
                    self._host = None
                self._host = await _Host.create(self)
            return self._host

    async def _warm_zygote(self) -> _Zygote:
        zygote = self._zygote
        if zygote is not None and zygote.alive:
            return zygote
        host = await self._prepared()
        async with self._loop_lock():
            if self._zygote is None or not self._zygote.alive:
                if self._zygote is not None:
                    await self._zygote.stop()
                    self._zygote = None
                zygote = _Zygote(self)
                try:
                    await zygote.start(host)
                except BaseException:
                    await zygote.stop()
                    raise
                self._zygote = zygote
            return self._zygote


@contextlib.contextmanager
def _deadline(seconds: float | None, kill: Callable[[], None], died: asyncio.Future[str]) -> Any:
    """Kill the sandbox once `seconds` of wall time have passed (the rollout then fails,
    `died` saying why)."""
    if seconds is None:
        yield
        return

    def expired() -> None:
        log.warning("sandbox wall time of %gs is up; killing it", seconds)
        if not died.done():
            died.set_result(f"sandbox wall time of {seconds:g}s is up: killed")
        kill()

    timer = asyncio.get_running_loop().call_later(seconds, expired)
    try:
        yield
    finally:
        timer.cancel()
