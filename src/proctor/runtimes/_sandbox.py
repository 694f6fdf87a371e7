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

import argparse
import asyncio
import collections
import contextlib
import ctypes
import json
import logging
import math
import os
import re
import secrets
import shutil
import signal
import socket
import stat
import struct
import subprocess
import sys
import tempfile
import traceback
import weakref
from collections.abc import AsyncIterator, Callable, Iterable, Mapping
from contextlib import AbstractAsyncContextManager
from dataclasses import dataclass
from pathlib import Path
from typing import IO, TYPE_CHECKING, Any, Literal, NoReturn

from .._errors import ProctorError, RuntimeLaunchError, TeardownError
from ..serve import SHUTDOWN_FAILED
from ._base import Endpoint, Provider
from ._teardown import MARK, check_teardown, parse_report

if TYPE_CHECKING:
    from ..env._environment import Environment
    from ..tasks._task import Task

__all__ = ["SandboxRuntime"]

log = logging.getLogger("proctor.runtimes.sandbox")

Network = Literal["none", "host"]

SANDBOX_UID = 65534  # nobody, inside the sandbox
# When proctor runs as root, each runtime's sandboxes run on the host as a uid of their
# own from this range: no account and, by systemd's conventions, no other process has it.
HOST_UIDS = range(0x70000000, 0x7FFE0000)
WORKDIR = "/sandbox"
CONTROL_DIR = "/run/proctor"  # where Unix sockets live, inside the sandbox
SYSTEM = ("/usr", "/bin", "/sbin", "/lib", "/lib32", "/lib64", "/libx32", "/etc")
LIMIT_KEYS = ("memory", "processes", "file_size", "tmpfs", "cpu_time", "wall_time")
DEFAULT_LIMITS: Mapping[str, Any] = {
    "memory": "2G",
    "processes": 256,
    "file_size": "1G",
    "tmpfs": "512M",
}

_TAIL = 20  # stderr lines quoted in a launch error
_TAIL_LINE = 2000
_MAX_LINE = 1 << 16
_REAP = 5.0  # seconds to wait for a killed process to be gone
_LAST_WORDS = 0.5  # seconds a dead process's pipes may still deliver its stderr
_READY = b'{"ready": true}'
_ENTRY = "proctor.runtimes._sandbox"


class SandboxRuntime(Provider):
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

    async def __aenter__(self) -> SandboxRuntime:
        if self.warm:
            await self._warm_zygote()
        else:
            await self._prepared()
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.aclose()

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
            with _deadline(limits.wall_time, sandbox.kill):
                yield Endpoint(url, token=token)
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
        zygote = await self._warm_zygote()
        child = zygote.fork(limits)
        try:
            url = await child.ready(self.startup_timeout)
            with _deadline(limits.wall_time, child.kill):
                yield Endpoint(url, token=child.token)
        finally:
            await child.stop(self.stop_timeout)
        check_teardown(child.teardown_error)

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


# -- limits ------------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class _Limits:
    memory: int | None = None
    processes: int | None = None
    file_size: int | None = None
    tmpfs: int | None = None
    cpu_time: float | None = None
    wall_time: float | None = None

    @classmethod
    def parse(cls, spec: Mapping[str, Any], where: str) -> _Limits:
        """Validate a limits mapping (None values mean no limit)."""
        if not isinstance(spec, Mapping):
            raise ValueError(f"{where}: expected a mapping of {', '.join(LIMIT_KEYS)}")
        unknown = sorted(set(spec) - set(LIMIT_KEYS))
        if unknown:
            raise ValueError(
                f"{where}: unknown limit {unknown[0]!r} (known: {', '.join(LIMIT_KEYS)})"
            )
        memory, processes = spec.get("memory"), spec.get("processes")
        file_size, tmpfs = spec.get("file_size"), spec.get("tmpfs")
        return cls(
            memory=None if memory is None else _size(memory, f"{where}.memory"),
            processes=None if processes is None else _count(processes, f"{where}.processes"),
            file_size=None if file_size is None else _size(file_size, f"{where}.file_size"),
            tmpfs=None if tmpfs is None else _size(tmpfs, f"{where}.tmpfs"),
            cpu_time=_seconds(spec.get("cpu_time"), f"{where}.cpu_time"),
            wall_time=_seconds(spec.get("wall_time"), f"{where}.wall_time"),
        )

    def given(self) -> dict[str, Any]:
        return {k: getattr(self, k) for k in LIMIT_KEYS if getattr(self, k) is not None}

    def inside(self) -> dict[str, Any]:
        """What the sandbox applies itself (wall time is the host's; tmpfs a cold bwrap's)."""
        return {k: v for k, v in self.given().items() if k != "wall_time"}


_UNITS = {"": 1, "k": 1 << 10, "m": 1 << 20, "g": 1 << 30, "t": 1 << 40}


def _size(value: Any, where: str) -> int:
    if isinstance(value, int) and not isinstance(value, bool) and value > 0:
        return value
    match = re.fullmatch(r"\s*(\d+(?:\.\d+)?)\s*([kmgt]?)(?:i?b)?\s*", str(value), re.I)
    if isinstance(value, bool) or not isinstance(value, str) or match is None:
        raise ValueError(f"{where}: expected bytes (int) or a size like '512M', got {value!r}")
    size = int(float(match[1]) * _UNITS[match[2].lower()])
    if size <= 0:
        raise ValueError(f"{where}: must be positive, got {value!r}")
    return size


def _count(value: Any, where: str) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise ValueError(f"{where}: expected a positive integer, got {value!r}")
    return value


def _seconds(value: Any, where: str) -> float | None:
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int | float) or not value > 0:
        raise ValueError(f"{where}: expected positive seconds, got {value!r}")
    if not math.isfinite(value):
        raise ValueError(f"{where}: expected finite seconds, got {value!r}")
    return float(value)


@contextlib.contextmanager
def _deadline(seconds: float | None, kill: Callable[[], None]) -> Any:
    """Kill the sandbox once `seconds` of wall time have passed (the rollout then fails)."""
    if seconds is None:
        yield
        return

    def expired() -> None:
        log.warning("sandbox wall time of %gs is up; killing it", seconds)
        kill()

    timer = asyncio.get_running_loop().call_later(seconds, expired)
    try:
        yield
    finally:
        timer.cancel()


# -- the host side -------------------------------------------------------------------------------

_FOLDER = "proctor-sandbox-"  # then the owner's PID-START, then mkdtemp's suffix


def _owner(pid: int) -> str | None:
    """`PID-START` of a live process (its start time in /proc/PID/stat), else None."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    fields = stat[stat.rindex(")") + 2 :].split()
    return None if fields[0] == "Z" else f"{pid}-{fields[19]}"


def _reconcile(tmpdir: str | Path) -> list[Path]:
    removed = []
    try:
        entries = list(os.scandir(tmpdir))
    except OSError:
        return []
    for entry in entries:
        found = re.fullmatch(rf"{_FOLDER}(\d+)-(\d+)-.+", entry.name)
        if found is None or _owner(int(found[1])) == f"{found[1]}-{found[2]}":
            continue
        with contextlib.suppress(OSError):
            info = entry.stat(follow_symlinks=False)
            if stat.S_ISDIR(info.st_mode) and info.st_uid == os.geteuid():
                shutil.rmtree(entry.path)
                removed.append(Path(entry.path))
    return removed


class _Host:
    """One runtime's host state: its folder, what to bind, and the mount helper (as root)."""

    def __init__(self, runtime: SandboxRuntime, base: Path) -> None:
        self.base = base
        self.binds: list[tuple[str, str, str]] = []  # (bwrap option, source, destination)
        self.helper: _Proc | None = None
        self.as_root = os.geteuid() == 0
        self.nsenter = shutil.which("nsenter") or "nsenter"
        self._cleanup = weakref.finalize(self, shutil.rmtree, str(base), True)
        self.runtime = runtime

    @classmethod
    async def create(cls, runtime: SandboxRuntime) -> _Host:
        """Find what to bind, make the folder, and (as root) stage the binds.

        Raises:
            RuntimeLaunchError: bwrap is missing, or the interpreter cannot be inspected,
                or the mount helper failed.
        """
        if shutil.which(runtime.bwrap) is None:
            raise RuntimeLaunchError(
                f"{runtime.bwrap}: not found; install bubblewrap (apt-get install -y bubblewrap)"
            )
        paths = await _python_paths(runtime)
        _reconcile(tempfile.gettempdir())
        host = cls(runtime, Path(tempfile.mkdtemp(prefix=f"{_FOLDER}{_owner(os.getpid())}-")))
        try:
            staged = host._layout([*paths, runtime.source, *runtime.binds], runtime.writable)
            if staged:
                await host._stage(staged)
        except BaseException:
            await host.close()
            raise
        return host

    def _layout(self, paths: list[Path], writable: list[Path]) -> list[str]:
        """Decide the binds; as root, make their staging points and return SRC DEST pairs."""
        self.base.chmod(0o711)  # the sandbox user passes through to its sockets, no more
        if self.as_root:
            _readable_by_others(self.runtime.source)
        for path in writable:
            if not path.is_dir():
                raise RuntimeLaunchError(f"writable bind {path}: not a folder")
        sources = [("--ro-bind", src, dest) for src, dest in _bind_sources(paths)]
        sources += [("--bind", os.path.realpath(p), str(p)) for p in writable]
        if not self.as_root:
            self.binds = sources
            return []
        stage = self.base / "stage"
        stage.mkdir(mode=0o711)
        pairs: list[str] = []
        for i, (option, src, dest) in enumerate(sources):
            point = stage / str(i)
            if os.path.isdir(src):
                point.mkdir()
            else:
                point.touch()
            pairs += [src, str(point)]
            self.binds.append((option, str(point), dest))
        return pairs

    async def _stage(self, pairs: list[str]) -> None:
        """Bind SRC onto DEST pairs in a private mount namespace held by a helper process.

        bwrap, run as `host_uid`, enters that namespace (`nsenter`) and binds from there
        what it could not reach on the host (the Python under /root, a private folder).
        """
        helper = _Proc(self.runtime, "mount helper")
        self.helper = helper
        ready: asyncio.Future[None] = asyncio.get_running_loop().create_future()

        def announced(line: bytes) -> bool:
            if line != b"READY" or ready.done():
                return False
            ready.set_result(None)
            return True

        helper.on_stdout = announced
        await helper.spawn([sys.executable, "-m", _ENTRY, "stage", *pairs], stdin=subprocess.PIPE)
        await helper.first(ready, self.runtime.startup_timeout)

    @property
    def usable(self) -> bool:
        """False once the mount helper died (its namespace is gone with it)."""
        return self.helper is None or not self.helper.exited.is_set()

    def control_dir(self) -> Path:
        """A fresh host folder for Unix sockets, owned by the sandbox user."""
        path = self.base / f"ctl-{secrets.token_hex(6)}"
        path.mkdir(mode=0o700)
        if self.as_root:
            os.chown(path, self.runtime.host_uid, self.runtime.host_uid)
        return path

    def argv(
        self,
        command: list[str],
        *,
        ctl: Path | None,
        tmpfs: int | None,
        info_fd: int | None = None,
    ) -> list[str]:
        """The command line that runs `command` in a sandbox.

        `ctl` is the sockets' folder, `tmpfs` the size of each tmpfs. A cold sandbox
        (`info_fd`) may not create user namespaces; a zygote's rollouts need to, and
        forbid it themselves once they have theirs.
        """
        runtime = self.runtime
        argv: list[str] = []
        if self.as_root:
            assert self.helper is not None and self.helper.pid is not None
            uid = str(runtime.host_uid)
            mnt = f"--mount=/proc/{self.helper.pid}/ns/mnt"
            argv += [self.nsenter, mnt, "--setuid", uid, "--setgid", uid, "--"]
        argv += [runtime.bwrap, "--unshare-all", "--unshare-user"]
        if info_fd is not None:
            argv.append("--disable-userns")
        if runtime.network == "host":
            argv.append("--share-net")
        argv += ["--die-with-parent", "--cap-drop", "ALL", "--new-session"]
        argv += ["--uid", str(SANDBOX_UID), "--gid", str(SANDBOX_UID), "--hostname", "sandbox"]
        env = {
            "PATH": "/usr/local/bin:/usr/bin:/bin",
            "HOME": WORKDIR,
            "TMPDIR": "/tmp",
            "LANG": "C.UTF-8",
            "PYTHONUNBUFFERED": "1",
            "PYTHONDONTWRITEBYTECODE": "1",
            **runtime.env,
        }
        argv.append("--clearenv")
        for key, value in env.items():
            argv += ["--setenv", key, value]
        argv += ["--proc", "/proc", "--dev", "/dev"]
        for point in ("/dev/shm", "/tmp", WORKDIR):
            argv += [*(["--size", str(tmpfs)] if tmpfs else []), "--tmpfs", point]
        argv += ["--chdir", WORKDIR]
        for path in SYSTEM:  # binds after the tmpfs mounts, so a bind under /tmp shows
            if os.path.islink(path):
                argv += ["--symlink", os.readlink(path), path]
            elif os.path.isdir(path):
                argv += ["--ro-bind", path, path]
        for option, src, dest in self.binds:
            argv += [option, src, dest]
        if ctl is not None:
            argv += ["--bind", str(ctl), CONTROL_DIR]
        argv += ["--remount-ro", "/dev", "--remount-ro", "/"]  # the mount points stay writable
        if info_fd is not None:
            argv += ["--as-pid-1", "--info-fd", str(info_fd)]
        return [*argv, "--", *command]

    async def close(self) -> None:
        helper, self.helper = self.helper, None
        try:
            if helper is not None:
                await helper.stop(self.runtime.stop_timeout)
        finally:
            self._cleanup()


async def _python_paths(runtime: SandboxRuntime) -> list[Path]:
    """The interpreter's prefixes and `sys.path`, as it sees them inside the sandbox."""
    code = (
        "import json, os, sys; print(json.dumps([sys.prefix, sys.base_prefix, sys.exec_prefix,"
        " sys.base_exec_prefix, os.path.realpath(sys.executable), *sys.path]))"
    )
    env = {"PATH": "/usr/local/bin:/usr/bin:/bin", "LANG": "C.UTF-8", **runtime.env}
    try:
        proc = await asyncio.create_subprocess_exec(
            runtime.python, "-c", code, env=env, cwd="/",
            stdout=subprocess.PIPE, stderr=subprocess.PIPE,
        )  # fmt: skip
        try:
            out, err = await asyncio.wait_for(proc.communicate(), runtime.startup_timeout)
        except TimeoutError:
            proc.kill()
            await proc.wait()
            raise
    except (OSError, TimeoutError) as exc:
        raise RuntimeLaunchError(
            f"{runtime.python}: cannot inspect the interpreter: {exc}"
        ) from exc
    if proc.returncode != 0:
        raise RuntimeLaunchError(f"{runtime.python}: cannot inspect the interpreter: {err!r:.500}")
    return [Path(p) for p in json.loads(out) if p]


def _bind_sources(paths: Iterable[Path]) -> list[tuple[str, str]]:
    """(real source, destination) pairs: existing, outside the system dirs, not nested."""
    wanted: dict[str, str] = {}
    for path in paths:
        if path.is_file() and path.suffix == ".py":
            path = path.parent  # a source file: its folder, for sibling imports
        for dest in {os.path.abspath(path), os.path.realpath(path)}:
            if os.path.exists(dest) and not _under(dest, SYSTEM):
                wanted[dest] = os.path.realpath(dest)
    kept: list[tuple[str, str]] = []
    for dest in sorted(wanted):
        if not _under(dest, [d for _, d in kept]):
            kept.append((wanted[dest], dest))
    return kept


def _host_uid() -> int:
    """A fresh uid from `HOST_UIDS` when running as root, else this process's own."""
    if os.geteuid() != 0:
        return os.getuid()
    return HOST_UIDS.start + secrets.randbelow(len(HOST_UIDS))


def _readable_by_others(source: Path) -> None:
    """Refuse a source the sandbox user could not read (a private folder, say).

    Raises:
        RuntimeLaunchError: the source or its folder is closed to others.
    """
    folder = source if source.is_dir() else source.parent
    for path, need in ((folder, 0o005), *([] if source.is_dir() else [(source, 0o004)])):
        info = path.stat()
        if info.st_mode & need != need:
            raise RuntimeLaunchError(
                f"{path}: not readable by the sandbox user (a uid of its own on the host); "
                f"allow others to read it (chmod o+r{'x' if need & 1 else ''})"
            )


def _under(path: str, roots: Iterable[str]) -> bool:
    return any(path == r or path.startswith(r.rstrip("/") + "/") for r in roots)


class _Proc(asyncio.SubprocessProtocol):
    """A host-side child (mount helper, sandbox, zygote): output to the log, exit watched."""

    def __init__(self, runtime: SandboxRuntime, what: str) -> None:
        self.runtime = runtime
        self.what = what
        self.on_stdout: Callable[[bytes], bool] = lambda line: False  # True: consumed
        self.transport: asyncio.SubprocessTransport | None = None
        self.tail: collections.deque[bytes] = collections.deque(maxlen=_TAIL)
        self.partial = {1: b"", 2: b""}
        self.exited = asyncio.Event()
        self.drained = asyncio.Event()  # exited, and its pipes are at EOF
        self.sink: IO[bytes] | None = None
        self.teardown_error: str | None = None  # what a cold server's shutdown hooks said

    @property
    def pid(self) -> int | None:
        return None if self.transport is None else self.transport.get_pid()

    async def spawn(
        self, argv: list[str], *, stdin: int = subprocess.DEVNULL, pass_fds: tuple[int, ...] = ()
    ) -> None:
        """Start `argv`.

        Raises:
            RuntimeLaunchError: it cannot be started.
        """
        if self.runtime.log is not None:
            self.sink = open(self.runtime.log, "ab")  # noqa: SIM115, ASYNC230 - closed in stop()
        loop = asyncio.get_running_loop()
        try:
            self.transport, _ = await loop.subprocess_exec(
                lambda: self, *argv, stdin=stdin, stdout=subprocess.PIPE,
                stderr=subprocess.PIPE, pass_fds=pass_fds, start_new_session=True,
            )  # fmt: skip
        except OSError as exc:
            raise RuntimeLaunchError(f"{self.what}: cannot start {argv[0]}: {exc}") from exc

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
            await asyncio.wait_for(self.drained.wait(), _LAST_WORDS)
        code = None if self.transport is None else self.transport.get_returncode()
        return RuntimeLaunchError(self.why(f"exited with code {code} before it was ready"))

    def why(self, what: str) -> str:
        tail = b"\n".join(self.tail).decode(errors="replace").strip()
        return f"{self.what}: {what}" + (f"\n--- stderr (last lines) ---\n{tail}" if tail else "")

    def kill(self) -> None:
        pid = self.pid
        if pid is not None and not self.exited.is_set():
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.kill(pid, signal.SIGKILL)

    async def stop(self, grace: float) -> None:
        """Close its stdin (if a pipe), give it `grace` to exit, kill it; always reap."""
        transport = self.transport
        try:
            if transport is not None and not self.exited.is_set():
                stdin = transport.get_pipe_transport(0)
                if stdin is not None:
                    stdin.close()
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(self.exited.wait(), grace)
        finally:
            self.kill()
            if transport is not None:
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(self.exited.wait(), _REAP)
                transport.close()
            if self.sink is not None:
                self.sink.close()

    # -- protocol --

    def pipe_data_received(self, fd: int, data: bytes) -> None:
        *lines, self.partial[fd] = (self.partial[fd] + data).split(b"\n")
        if len(self.partial[fd]) > _MAX_LINE:  # no newline in sight: pass it on in pieces
            lines.append(self.partial[fd])
            self.partial[fd] = b""
        for line in lines:
            self._line(fd, line)

    def pipe_connection_lost(self, fd: int, exc: Exception | None) -> None:
        rest, self.partial[fd] = self.partial.get(fd, b""), b""
        if rest:
            self._line(fd, rest)

    def process_exited(self) -> None:
        self.exited.set()

    def connection_lost(self, exc: Exception | None) -> None:
        self.drained.set()

    def _line(self, fd: int, line: bytes) -> None:
        if fd == 1 and self.on_stdout(line):
            return
        if fd == 2:
            if line.startswith(MARK):  # a cold sandbox's server (its pid is namespaced)
                self.teardown_error = parse_report(line)[1]
            self.tail.append(line[:_TAIL_LINE])
        if self.sink is not None:
            self.sink.write(line + b"\n")
        elif log.isEnabledFor(logging.DEBUG):
            log.debug("[%s %s] %s", self.what, self.pid, line.decode(errors="replace"))


class _Cold:
    """One rollout's own sandbox: `bwrap ... --as-pid-1 python -m ..._sandbox serve`."""

    def __init__(self, runtime: SandboxRuntime) -> None:
        self.runtime = runtime
        self.proc = _Proc(runtime, "sandbox")
        self.pidfd: int | None = None
        self.announced: asyncio.Future[bytes] = asyncio.get_running_loop().create_future()
        self.proc.on_stdout = self._stdout

    def _stdout(self, line: bytes) -> bool:
        if self.announced.done() or not line.startswith(_ANNOUNCED):
            return False
        self.announced.set_result(line)
        return True

    async def ready(self, info_fd: int, socket_path: Path | None) -> str:
        """Wait for the server's announcement; the endpoint URL."""
        line = await self.proc.first(self.announced, self.runtime.startup_timeout)
        with contextlib.suppress(OSError, ValueError, KeyError):
            pid = json.loads(os.read(info_fd, 65536))["child-pid"]
            self.pidfd = os.pidfd_open(pid)
        if socket_path is not None:
            return f"unix://{socket_path}"
        return f"tcp://127.0.0.1:{int(line.partition(b'=')[2])}"

    def kill(self) -> None:
        if self.pidfd is not None:
            with contextlib.suppress(OSError):
                signal.pidfd_send_signal(self.pidfd, signal.SIGKILL)
        self.proc.kill()

    async def stop(self) -> None:
        """SIGTERM the server (its shutdown hooks run), SIGKILL the sandbox after the grace."""
        try:
            if self.pidfd is not None and not self.proc.exited.is_set():
                with contextlib.suppress(OSError):
                    signal.pidfd_send_signal(self.pidfd, signal.SIGTERM)
                try:
                    await asyncio.wait_for(self.proc.exited.wait(), self.runtime.stop_timeout)
                except TimeoutError:
                    log.warning(
                        "sandbox ignored SIGTERM for %gs; killing", self.runtime.stop_timeout
                    )
        finally:
            self.kill()
            await self.proc.stop(0)
            if self.pidfd is not None:
                os.close(self.pidfd)
            if not self.announced.done():
                self.announced.cancel()


_ANNOUNCED = (b"PROCTOR_SERVE_PORT=", b"PROCTOR_SERVE_UNIX=")


class _Zygote:
    """The warm pool: one sandbox whose zygote forks a rollout per request."""

    def __init__(self, runtime: SandboxRuntime) -> None:
        self.runtime = runtime
        self.proc = _Proc(runtime, "sandbox zygote")
        self.ctl: socket.socket | None = None
        self.sockets: Path | None = None
        self.ready = False

    @property
    def alive(self) -> bool:
        return self.ready and not self.proc.exited.is_set()

    async def start(self, host: _Host) -> None:
        """Start the zygote's sandbox and wait until it loaded the source.

        Raises:
            RuntimeLaunchError: the sandbox or the source failed (stderr quoted).
        """
        runtime = self.runtime
        if runtime.network == "none":
            self.sockets = host.control_dir()
        mine, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
        self.ctl = mine
        mine.setblocking(False)
        command = [runtime.python, "-m", _ENTRY, "zygote", str(runtime.source)]
        command += ["--network", runtime.network, "--control-fd", str(theirs.fileno())]
        if runtime.env_name:
            command += ["--env", runtime.env_name]
        try:
            argv = host.argv(command, ctl=self.sockets, tmpfs=runtime.limits.tmpfs)
            await self.proc.spawn(argv, pass_fds=(theirs.fileno(),))
        finally:
            theirs.close()
        hello = asyncio.ensure_future(asyncio.get_running_loop().sock_recv(mine, 4096))
        try:
            said = await self.proc.first(hello, runtime.startup_timeout)
        finally:
            hello.cancel()
        if said != _READY:  # its channel closed: it is exiting
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self.proc.exited.wait(), _REAP)
            raise await self.proc.died()
        self.ready = True

    def fork(self, limits: _Limits) -> _Forked:
        """Ask for a rollout; its channel reports its pid, then its readiness.

        Raises:
            RuntimeLaunchError: the zygote is gone or not reading.
        """
        mine, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
        name = secrets.token_hex(8)
        path = None if self.sockets is None else self.sockets / f"{name}.sock"
        try:
            if self.ctl is None or not self.alive:
                raise RuntimeLaunchError(self.proc.why("the zygote is not running"))
            request = json.dumps({"name": name, "limits": limits.inside()}).encode()
            socket.send_fds(self.ctl, [request], [theirs.fileno()])
            token = secrets.token_urlsafe(32)  # straight to the rollout, not via the zygote
            mine.send(json.dumps({"token": token}).encode())
        except OSError as exc:
            mine.close()
            raise RuntimeLaunchError(self.proc.why(f"cannot reach the zygote: {exc}")) from exc
        except BaseException:
            mine.close()
            raise
        finally:
            theirs.close()
        return _Forked(self, mine, path, token)

    async def stop(self) -> None:
        """Close the zygote's channel (it exits and its sandbox with it), then reap it."""
        if self.ctl is not None:
            self.ctl.close()
        await self.proc.stop(self.runtime.stop_timeout)
        if self.sockets is not None:
            shutil.rmtree(self.sockets, ignore_errors=True)


class _Forked:
    """One warm rollout: its channel to the sandboxed child, its pidfd, its readiness."""

    def __init__(self, zygote: _Zygote, sock: socket.socket, path: Path | None, token: str) -> None:
        loop = asyncio.get_running_loop()
        self.zygote = zygote
        self.token = token
        self.sock = sock
        self.path = path
        self.pidfd: int | None = None
        self.has_pid = asyncio.Event()
        self.gone = asyncio.Event()
        self.announced: asyncio.Future[int | None] = loop.create_future()
        self.teardown_error: str | None = None  # what its shutdown hooks said, if they failed
        sock.setblocking(False)
        loop.add_reader(sock.fileno(), self._readable)

    async def ready(self, timeout: float) -> str:  # noqa: ASYNC109
        """The endpoint URL, once the child serves.

        Raises:
            RuntimeLaunchError: the child failed, died, or stayed silent for `timeout`.
        """
        try:
            async with asyncio.timeout(timeout):
                port = await self.announced
        except TimeoutError:
            raise RuntimeLaunchError(
                self.zygote.proc.why(f"forked rollout not serving within {timeout:g}s")
            ) from None
        if self.path is not None:
            return f"unix://{self.path}"
        return f"tcp://127.0.0.1:{port}"

    def _readable(self) -> None:
        while True:
            try:
                data, fds, _, _ = socket.recv_fds(self.sock, 65536, 1)
            except (BlockingIOError, InterruptedError):
                return
            except OSError:
                data, fds = b"", []
            for fd in fds:
                if self.pidfd is None:
                    self._watch(fd)
                else:
                    os.close(fd)
            if not data and not fds:  # every end on the child's side is closed
                asyncio.get_running_loop().remove_reader(self.sock.fileno())
                self._fail("the forked rollout exited before serving")
                return
            try:
                msg = json.loads(data)
            except ValueError:
                msg = {"error": f"unreadable report {data[:200]!r}"}
            if "error" in msg:
                self._fail(f"forked rollout failed: {msg['error']}")
            elif "ready" in msg and not self.announced.done():
                self.announced.set_result(msg["ready"])
            if self.announced.done():  # nothing more to hear: its code runs from now on
                asyncio.get_running_loop().remove_reader(self.sock.fileno())
                return

    def _last_words(self) -> None:
        """Take a teardown report the rollout left on its channel before it exited."""
        while self.gone.is_set():
            try:
                data = self.sock.recv(65536)
            except OSError:  # nothing left (BlockingIOError) or the channel broke
                return
            if not data:
                return
            with contextlib.suppress(ValueError):
                msg = json.loads(data)
                if isinstance(msg, dict) and isinstance(msg.get("teardown_error"), str):
                    self.teardown_error = msg["teardown_error"][:2000]

    def _fail(self, why: str) -> None:
        if not self.announced.done():
            self.announced.set_exception(RuntimeLaunchError(self.zygote.proc.why(why)))

    def _watch(self, pidfd: int) -> None:
        self.pidfd = pidfd
        self.has_pid.set()
        asyncio.get_running_loop().add_reader(pidfd, self.gone.set)

    def kill(self) -> None:
        if self.pidfd is not None:
            with contextlib.suppress(OSError):
                signal.pidfd_send_signal(self.pidfd, signal.SIGKILL)

    async def stop(self, grace: float) -> None:
        """SIGTERM the rollout (its shutdown hooks run), SIGKILL it after `grace`.

        It is the first process of its own pid namespace, so its death ends every
        process it started.
        """
        loop = asyncio.get_running_loop()
        try:
            if not self.has_pid.is_set():  # stopped while forking: its pid is on the way
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(self.has_pid.wait(), _REAP)
            served = self.announced.done() and not self.announced.cancelled()
            if served and self.announced.exception() is None and self.pidfd is not None:
                with contextlib.suppress(OSError):
                    signal.pidfd_send_signal(self.pidfd, signal.SIGTERM)
                try:
                    await asyncio.wait_for(self.gone.wait(), grace)
                except TimeoutError:
                    log.warning("sandboxed rollout ignored SIGTERM for %gs; killing", grace)
        finally:
            self.kill()
            if self.pidfd is not None:
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(self.gone.wait(), _REAP)
                loop.remove_reader(self.pidfd)
                os.close(self.pidfd)
            loop.remove_reader(self.sock.fileno())
            self._last_words()
            self.sock.close()
            if not self.announced.done():
                self.announced.cancel()
            elif not self.announced.cancelled():
                self.announced.exception()  # a launch failure already raised; retrieved
            if self.path is not None:
                with contextlib.suppress(FileNotFoundError):
                    self.path.unlink()


# -- inside the sandbox ---------------------------------------------------------------------

_CLONE_NEWNS = 0x00020000
_CLONE_NEWCGROUP = 0x02000000
_CLONE_NEWUTS = 0x04000000
_CLONE_NEWIPC = 0x08000000
_CLONE_NEWUSER = 0x10000000
_CLONE_NEWPID = 0x20000000
_CLONE_NEWNET = 0x40000000
_MS_RDONLY, _MS_NOSUID, _MS_NODEV, _MS_NOEXEC = 1, 2, 4, 8
_MS_BIND, _MS_REC, _MS_PRIVATE = 4096, 16384, 1 << 18
_PR_CAPBSET_DROP, _PR_SET_NO_NEW_PRIVS, _PR_CAP_AMBIENT = 24, 38, 47
_PR_CAP_AMBIENT_CLEAR_ALL = 4
_CAP_VERSION_3 = 0x20080522
_SIOCGIFFLAGS, _SIOCSIFFLAGS, _IFF_UP = 0x8913, 0x8914, 0x1


def _libc() -> ctypes.CDLL:
    return ctypes.CDLL(None, use_errno=True)


def _check(result: int, what: str) -> None:
    if result != 0:
        err = ctypes.get_errno()
        raise OSError(err, f"{what}: {os.strerror(err)}")


def _mount(source: str, target: str, fstype: str | None, flags: int, data: str = "") -> None:
    libc = _libc()
    fs = fstype.encode() if fstype else None
    _check(libc.mount(source.encode(), target.encode(), fs, flags, data.encode() or None), target)


def _apply_limits(limits: Mapping[str, Any]) -> None:
    """Set the sandbox's rlimits on this process (its children inherit them)."""
    import resource

    if "memory" in limits:
        resource.setrlimit(resource.RLIMIT_AS, (limits["memory"], limits["memory"]))
    if "processes" in limits:
        resource.setrlimit(resource.RLIMIT_NPROC, (limits["processes"], limits["processes"]))
    if "file_size" in limits:
        resource.setrlimit(resource.RLIMIT_FSIZE, (limits["file_size"], limits["file_size"]))
    if "cpu_time" in limits:
        soft = math.ceil(limits["cpu_time"])
        resource.setrlimit(resource.RLIMIT_CPU, (soft, soft + 1))  # SIGXCPU, then SIGKILL


def _unshare(network: Network) -> None:
    """Enter new namespaces, mapping only our own uid and gid (no privilege on the host)."""
    uid, gid = os.getuid(), os.getgid()
    flags = _CLONE_NEWUSER | _CLONE_NEWNS | _CLONE_NEWPID | _CLONE_NEWIPC | _CLONE_NEWUTS
    flags |= _CLONE_NEWCGROUP | (_CLONE_NEWNET if network == "none" else 0)
    _check(_libc().unshare(flags), "unshare")
    Path("/proc/self/uid_map").write_text(f"{uid} {uid} 1")
    Path("/proc/self/setgroups").write_text("deny")
    Path("/proc/self/gid_map").write_text(f"{gid} {gid} 1")


def _seal(network: Network, tmpfs: int | None) -> None:
    """In the new namespaces: private mounts, loopback up, no further user namespace,
    then drop every capability."""
    _mount("none", "/", None, _MS_REC | _MS_PRIVATE)
    _mount("proc", "/proc", "proc", _MS_NOSUID | _MS_NODEV | _MS_NOEXEC)
    # A user namespace of its own would let the rollout mount tmpfs without a size cap.
    Path("/proc/sys/user/max_user_namespaces").write_text("0")
    private = {"/tmp": "1777", "/dev/shm": "1777", WORKDIR: "755"}
    kept = [(point, os.open(point, os.O_PATH)) for point in _binds_under(private)]
    size = f",size={tmpfs}" if tmpfs else ""
    for point, mode in private.items():
        _mount("tmpfs", point, "tmpfs", _MS_NOSUID | _MS_NODEV, f"mode={mode}{size}")
    for point, fd in kept:  # binds under those folders (a source under /tmp) stay
        if stat.S_ISDIR(os.fstat(fd).st_mode):
            os.makedirs(point, exist_ok=True)
        else:
            os.makedirs(os.path.dirname(point), exist_ok=True)
            Path(point).touch()
        _mount(f"/proc/self/fd/{fd}", point, None, _MS_BIND | _MS_REC)
        os.close(fd)
    if os.path.isdir(CONTROL_DIR):  # the other rollouts' sockets
        _mount("tmpfs", CONTROL_DIR, "tmpfs", _MS_RDONLY | _MS_NOSUID | _MS_NODEV, "mode=555")
    os.chdir(WORKDIR)
    if network == "none":
        with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as sock:
            import fcntl

            ifreq = struct.pack("16sH14x", b"lo", 0)
            flags = struct.unpack("16sH14x", fcntl.ioctl(sock, _SIOCGIFFLAGS, ifreq))[1]
            fcntl.ioctl(sock, _SIOCSIFFLAGS, struct.pack("16sH14x", b"lo", flags | _IFF_UP))
    libc = _libc()
    last = int(Path("/proc/sys/kernel/cap_last_cap").read_text())
    for cap in range(last + 1):
        _check(libc.prctl(_PR_CAPBSET_DROP, cap, 0, 0, 0), "dropping the bounding set")
    libc.prctl(_PR_CAP_AMBIENT, _PR_CAP_AMBIENT_CLEAR_ALL, 0, 0, 0)
    header = (ctypes.c_uint32 * 2)(_CAP_VERSION_3, 0)
    _check(libc.capset(header, (ctypes.c_uint32 * 6)()), "capset")
    _check(libc.prctl(_PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0), "no_new_privs")


def _binds_under(roots: Iterable[str]) -> list[str]:
    """The outermost mount points strictly below `roots`, from /proc/self/mountinfo."""
    points = []
    for line in Path("/proc/self/mountinfo").read_bytes().splitlines():
        field = re.sub(rb"\\([0-7]{3})", lambda m: bytes([int(m[1], 8)]), line.split()[4])
        points.append(os.fsdecode(field))
    below = sorted(p for p in points if any(p.startswith(r + "/") for r in roots))
    outer: list[str] = []
    for point in below:
        if not _under(point, outer):
            outer.append(point)
    return outer


def _load(source: str, env_name: str | None) -> Environment | None:
    from .._loader import find_environment

    try:
        return find_environment(source, env_name)
    except ProctorError as exc:
        print(f"error: {exc}", file=sys.stderr, flush=True)
        return None


def _serve_main(args: argparse.Namespace) -> int:
    """A cold sandbox's server: limits, then load and serve (on `--unix` or a port)."""
    from ..serve import serve

    with open(args.token_fd, "rb") as pipe:
        token = pipe.read().decode()
    _apply_limits(json.loads(args.limits))
    env = _load(args.source, args.env_name)
    if env is None:
        return 1
    asyncio.run(serve(env, unix=args.unix, token=token))
    return 0


def _zygote_main(args: argparse.Namespace) -> int:
    """Load the source once; fork an isolated rollout for each request on the channel."""
    ctl = socket.socket(fileno=args.control_fd)
    env = _load(args.source, args.env_name)
    if env is None:
        return 1
    import gc

    from .. import serve  # noqa: F401 - loaded once here, not in every child

    asyncio.run(asyncio.sleep(0))  # asyncio's lazy imports and first-use setup, once
    gc.freeze()  # children's collections then leave these objects' pages shared
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # the host decides when we stop
    sys.stderr.flush()
    ctl.send(_READY)
    while True:
        data, fds, _, _ = socket.recv_fds(ctl, 65536, 1)
        with contextlib.suppress(ChildProcessError):
            while os.waitpid(-1, os.WNOHANG)[0]:
                pass  # earlier children, which exit as soon as their rollout is forked
        if not data:
            return 0  # the host closed the channel (or died): the sandbox ends with us
        if not fds:
            continue
        channel = socket.socket(fileno=fds[0])
        channel.set_inheritable(False)
        try:
            _fork(env, ctl, channel, json.loads(data), args.network)
        finally:
            channel.close()


def _fork(
    env: Environment,
    ctl: socket.socket,
    channel: socket.socket,
    request: dict[str, Any],
    network: Network,
) -> None:
    listener = None
    try:
        if network == "none":
            listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
            listener.bind(f"{CONTROL_DIR}/{request['name']}.sock")
            listener.listen(128)
        pid = os.fork()
    except (OSError, KeyError) as exc:
        _report(channel, {"error": f"cannot fork a rollout: {exc}"})
        if listener is not None:
            listener.close()
        return
    if pid == 0:
        ctl.close()  # the zygote's channel is not the rollout's to use
        _isolated(env, channel, listener, request.get("limits") or {}, network)
    if listener is not None:
        listener.close()


def _isolated(
    env: Environment,
    channel: socket.socket,
    listener: socket.socket | None,
    limits: Mapping[str, Any],
    network: Network,
) -> NoReturn:
    """New namespaces, then a child that is the first process of the new pid namespace.

    The child waits until its pidfd is on its way to the host (our exit closes `go`), so
    nothing it runs can speak on the channel before that.
    """
    try:
        _unshare(network)
        wait, go = os.pipe()
        pid = os.fork()
    except BaseException as exc:
        _report(channel, {"error": f"cannot isolate the rollout: {exc}"})
        os._exit(1)
    if pid == 0:
        os.close(go)
        os.read(wait, 1)
        os.close(wait)
        _rollout(env, channel, listener, limits, network)
    try:
        socket.send_fds(channel, [b'{"pid": true}'], [os.pidfd_open(pid)])
    finally:
        os._exit(0)


def _rollout(
    env: Environment,
    channel: socket.socket,
    listener: socket.socket | None,
    limits: Mapping[str, Any],
    network: Network,
) -> NoReturn:
    from ..serve import serve

    code = 1
    announced = False

    def ready(port: int | None) -> None:
        nonlocal announced
        _report(channel, {"ready": port})
        announced = True

    try:
        token = json.loads(channel.recv(4096))["token"]  # sent by the host with the request
        os.setsid()
        signal.signal(signal.SIGINT, signal.SIG_DFL)
        _seal(network, limits.get("tmpfs"))
        _apply_limits(limits)
        os.dup2(2, 1)  # the environment's prints go to the log
        null = os.open(os.devnull, os.O_RDONLY)
        os.dup2(null, 0)
        os.close(null)
        asyncio.run(
            serve(
                env,
                unix=listener,
                token=token,
                announce=ready,
                announce_unix=lambda _: ready(None),
            )
        )
        code = 0
    except BaseException as exc:
        if not announced:
            _report(channel, {"error": f"{type(exc).__name__}: {exc}"})
        elif isinstance(exc, TeardownError):  # read by the host once we are gone
            _report(channel, {"teardown_error": str(exc).removeprefix(SHUTDOWN_FAILED)})
        traceback.print_exc()
    finally:
        with contextlib.suppress(Exception):
            sys.stdout.flush()
            sys.stderr.flush()
        os._exit(code)


def _report(channel: socket.socket, msg: dict[str, Any]) -> None:
    with contextlib.suppress(OSError):
        channel.send(json.dumps(msg).encode())


def _stage_main(args: argparse.Namespace) -> int:
    """The mount helper: bind SRC onto DEST pairs in a private mount namespace, then hold it."""
    try:
        _check(_libc().unshare(_CLONE_NEWNS), "unshare")
        _mount("none", "/", None, _MS_REC | _MS_PRIVATE)
        for src, dest in zip(args.pairs[::2], args.pairs[1::2], strict=True):
            _mount(src, dest, None, _MS_BIND | _MS_REC)
    except (OSError, ValueError) as exc:
        print(f"error: cannot stage the sandbox's binds: {exc}", file=sys.stderr, flush=True)
        return 1
    print("READY", flush=True)
    sys.stdin.read()  # until the host closes our stdin (or dies)
    return 0


def main(argv: list[str] | None = None) -> int:
    """`python -m proctor.runtimes._sandbox {serve,zygote,stage} ...` (used by the runtime)."""
    parser = argparse.ArgumentParser(prog=f"python -m {_ENTRY}")
    commands = parser.add_subparsers(dest="command", required=True)
    cold = commands.add_parser("serve")
    cold.add_argument("source")
    cold.add_argument("--env", dest="env_name", default=None)
    cold.add_argument("--unix", default=None)
    cold.add_argument("--limits", default="{}")
    cold.add_argument("--token-fd", type=int, required=True)
    warm = commands.add_parser("zygote")
    warm.add_argument("source")
    warm.add_argument("--env", dest="env_name", default=None)
    warm.add_argument("--network", choices=("none", "host"), required=True)
    warm.add_argument("--control-fd", type=int, required=True)
    stage = commands.add_parser("stage")
    stage.add_argument("pairs", nargs="*")
    args = parser.parse_args(argv)
    run = {"serve": _serve_main, "zygote": _zygote_main, "stage": _stage_main}[args.command]
    return run(args)


if __name__ == "__main__":
    sys.exit(main())
