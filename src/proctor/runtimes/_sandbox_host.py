"""The host side of `SandboxRuntime`: bwrap's command line, the mount helper, the folders.

`_Host` is one runtime's state on the host: its folder (`proctor-sandbox-PID-START-*`,
removed by the next runtime to start or by `reconcile`), what to bind, and (as root)
the mount helper holding the staged binds. `_Cold` is one rollout's own sandbox,
`_Zygote` the warm sandbox that forks rollouts, `_Forked` one warm rollout.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import os
import secrets
import shutil
import signal
import socket
import subprocess
import sys
import weakref
from collections.abc import Callable, Iterable, Mapping
from pathlib import Path
from typing import Any, Literal, Protocol

from .._errors import RuntimeLaunchError
from .._tempdirs import owned_tempdir, sweep
from ._enter import SubstrateEntry
from ._process import REAP, Child
from ._sandbox_limits import _Limits
from ._warm import Forked, request

log = logging.getLogger("proctor.runtimes.sandbox")

Network = Literal["none", "host"]

WORKDIR = "/sandbox"
CONTROL_DIR = "/run/proctor"  # where Unix sockets live, inside the sandbox
_READY = b'{"ready": true}'
_ENTRY = "proctor.runtimes._sandbox_inside"  # never imported by the package: run with -m

SANDBOX_UID = 65534  # nobody, inside the sandbox
# When proctor runs as root, each runtime's sandboxes run on the host as a uid of their
# own from this range: no account and, by systemd's conventions, no other process has it.
HOST_UIDS = range(0x70000000, 0x7FFE0000)
SYSTEM = ("/usr", "/bin", "/sbin", "/lib", "/lib32", "/lib64", "/libx32", "/etc")


class SandboxSettings(Protocol):
    """What the host side reads of its `SandboxRuntime`: where things are and the bounds."""

    source: Path
    env_name: str | None
    network: Network
    python: str
    host_uid: int
    env: dict[str, str]
    binds: list[Path]
    writable: list[Path]
    limits: _Limits
    startup_timeout: float
    stop_timeout: float
    log: str | Path | None
    bwrap: str


def _reconcile(tmpdir: str | Path) -> list[Path]:
    """Remove this user's `proctor-sandbox-PID-START-*` folders whose owner is gone."""
    return sweep("sandbox", tmpdir)


class _Host:
    """One runtime's host state: its folder, what to bind, and the mount helper (as root)."""

    def __init__(self, runtime: SandboxSettings, base: Path) -> None:
        self.base = base
        self.binds: list[tuple[str, str, str]] = []  # (bwrap option, source, destination)
        self.helper: _Proc | None = None
        self.as_root = os.geteuid() == 0
        self.nsenter = shutil.which("nsenter") or "nsenter"
        self._cleanup = weakref.finalize(self, shutil.rmtree, str(base), True)
        self.runtime = runtime

    @classmethod
    async def create(cls, runtime: SandboxSettings) -> _Host:
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
        host = cls(runtime, Path(owned_tempdir("sandbox")))  # sweeps dead owners' first
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
        argv = self._entered()
        argv += [runtime.bwrap, "--unshare-all", "--unshare-user"]
        if info_fd is not None:
            argv.append("--disable-userns")
        if runtime.network == "host":
            argv.append("--share-net")
        argv += ["--die-with-parent", "--cap-drop", "ALL", "--new-session"]
        argv += ["--uid", str(SANDBOX_UID), "--gid", str(SANDBOX_UID), "--hostname", "sandbox"]
        argv += self._environment()
        argv += ["--proc", "/proc", "--dev", "/dev"]
        for point in ("/dev/shm", "/tmp", WORKDIR):
            argv += [*(["--size", str(tmpfs)] if tmpfs else []), "--tmpfs", point]
        argv += ["--chdir", WORKDIR, *self._binds()]  # after the tmpfs: a bind under /tmp shows
        if ctl is not None:
            argv += ["--bind", str(ctl), CONTROL_DIR]
        argv += ["--remount-ro", "/dev", "--remount-ro", "/"]  # the mount points stay writable
        if info_fd is not None:
            argv += ["--as-pid-1", "--info-fd", str(info_fd)]
        return [*argv, "--", *command]

    def entry(self, pid: int, limits: Mapping[str, Any]) -> SubstrateEntry:
        """`nsenter` into every namespace of the sandbox whose first process is `pid`, as
        the sandbox's user, in its root and working folder, with its `limits`."""
        uid = str(SANDBOX_UID)
        argv = [self.nsenter, f"--target={pid}", "--user", "--mount", "--pid", "--net"]
        argv += ["--ipc", "--uts", "--cgroup", "--root", "--wd", "--setuid", uid, "--setgid", uid]
        env = {"PATH": "/usr/local/bin:/usr/bin:/bin", "LANG": "C.UTF-8", "HOME": WORKDIR}
        return SubstrateEntry(
            "sandbox",
            (*argv, "--"),
            self.runtime.python,
            WORKDIR,
            {**env, **self.runtime.env},
            dict(limits),
            self.runtime.network,
        )

    def _entered(self) -> list[str]:
        """As root: nsenter into the mount helper's namespace, as the sandbox's host uid."""
        if not self.as_root:
            return []
        assert self.helper is not None and self.helper.pid is not None
        uid = str(self.runtime.host_uid)
        mnt = f"--mount=/proc/{self.helper.pid}/ns/mnt"
        return [self.nsenter, mnt, "--setuid", uid, "--setgid", uid, "--"]

    def _environment(self) -> list[str]:
        """An emptied environment, then the sandbox's own and the runtime's `env`."""
        env = {
            "PATH": "/usr/local/bin:/usr/bin:/bin",
            "HOME": WORKDIR,
            "TMPDIR": "/tmp",
            "LANG": "C.UTF-8",
            "PYTHONUNBUFFERED": "1",
            "PYTHONDONTWRITEBYTECODE": "1",
            **self.runtime.env,
        }
        argv = ["--clearenv"]
        for key, value in env.items():
            argv += ["--setenv", key, value]
        return argv

    def _binds(self) -> list[str]:
        """The system's folders and links, then the Python, the source and `binds`."""
        argv: list[str] = []
        for path in SYSTEM:
            if os.path.islink(path):
                argv += ["--symlink", os.readlink(path), path]
            elif os.path.isdir(path):
                argv += ["--ro-bind", path, path]
        for option, src, dest in self.binds:
            argv += [option, src, dest]
        return argv

    async def close(self) -> None:
        helper, self.helper = self.helper, None
        try:
            if helper is not None:
                await helper.stop(self.runtime.stop_timeout)
        finally:
            self._cleanup()


async def _python_paths(runtime: SandboxSettings) -> list[Path]:
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


class _Proc(Child):
    """A host-side child (mount helper, sandbox, zygote): output to the log, exit watched."""

    warns = False

    def __init__(self, runtime: SandboxSettings, what: str) -> None:
        super().__init__(what, log, runtime.log)
        self.on_stdout: Callable[[bytes], bool] = lambda line: False  # True: consumed

    def stdout(self, line: bytes) -> bool:
        return self.on_stdout(line)

    def terminate(self) -> None:
        """Close its stdin (if a pipe): the mount helper exits on EOF."""
        stdin = None if self.transport is None else self.transport.get_pipe_transport(0)
        if stdin is not None:
            stdin.close()


class _Cold:
    """One rollout's own sandbox: `bwrap ... --as-pid-1 python -m ..._sandbox_inside serve`."""

    def __init__(self, runtime: SandboxSettings) -> None:
        self.runtime = runtime
        self.proc = _Proc(runtime, "sandbox")
        self.pidfd: int | None = None
        self.pid: int | None = None  # the sandbox's first process, on the host
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
            self.pid = pid
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


class _ZygoteGone(RuntimeLaunchError):
    """The zygote died before forking for this request: worth one retry on a new one."""


class _Zygote:
    """The warm pool: one sandbox whose zygote forks a rollout per request."""

    def __init__(self, runtime: SandboxSettings) -> None:
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
                await asyncio.wait_for(self.proc.exited.wait(), REAP)
            raise await self.proc.died()
        self.ready = True

    def fork(self, limits: _Limits) -> tuple[Forked, Path | None]:
        """Ask for a rollout: its `Forked` and its socket's host path (network "none").

        Raises:
            _ZygoteGone: the zygote is gone (also raised by the child's `ready` when it
                died before forking it, its exit not seen yet).
        """
        if self.ctl is None or not self.alive:
            raise _ZygoteGone(self.proc.why("the zygote is not running"))
        name = secrets.token_hex(8)
        path = None if self.sockets is None else self.sockets / f"{name}.sock"
        body = {"name": name, "limits": limits.inside()}
        try:
            return request(self.ctl, body, self.proc.why, lost=_ZygoteGone, logger=log), path
        except _ZygoteGone:
            self.ready = False  # not alive any more: the runtime replaces it
            raise

    async def stop(self) -> None:
        """Close the zygote's channel (it exits and its sandbox with it), then reap it."""
        if self.ctl is not None:
            self.ctl.close()
        await self.proc.stop(self.runtime.stop_timeout)
        if self.sockets is not None:
            shutil.rmtree(self.sockets, ignore_errors=True)


def _under(path: str, roots: Iterable[str]) -> bool:
    return any(path == r or path.startswith(r.rstrip("/") + "/") for r in roots)
