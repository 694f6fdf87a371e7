"""The jail a `CommandAgent` harness runs in: bubblewrap, another uid, its own namespaces.

`bwrap` gives the harness its own pid (a fresh `/proc`: the driver is not in it), mount,
network, IPC, UTS and cgroup namespaces, `--die-with-parent` and a new session. The
system folders (`/usr`, `/etc`, the `/bin`, `/lib*` links) are bound read-only, with the
harness's working directory, its program's install prefix, the folders of the paths its
command line names, the driver's Python (for the small init below) and the user's
`binds`; `writable` folders are bound read-write. `HOME` is a private tmpfs
(`/home/harness`), `/tmp` and `/dev/shm` too, each capped at `tmpfs_size` bytes
(bubblewrap 0.8 and later). Nothing else of the host is visible.

The uid: when the driver is root, bwrap runs as root without a user namespace (a root
bwrap would map any uid inside to root outside) and the jail's first process, `_jail_init`,
binds its listeners, hands HOME to a uid of the jail's own (`proctor._uids`: no account,
no other process), empties the capability bounding set and drops to that uid for good
before starting the harness: the harness is a stranger on the host, with no
capabilities and no_new_privs, that reads only what everybody may read, and no other
process (a `nobody` one included) can signal, trace or read `/proc` of it. Run
as another user, the jail is an unprivileged user namespace (uid 65534 inside): the same
uid on the host, so the jail's namespaces and binds are the whole separation (no other
files, no `/proc` of the driver, no ptrace of it, no way to its sockets), and nested user
namespaces are disabled (bubblewrap 0.8 and later).

Network: the jail has only its own loopback. The driver serves one Unix socket per
address the harness needs (the proxy session's port, each capability) in a folder bound
read-only at `/run/proctor` (from the host, only the driver can reach it: its 0700
folder holds it);
inside, `_jail_init` listens on `127.0.0.1` at the same port and relays to it, so
`OPENAI_BASE_URL=http://127.0.0.1:PORT/v1` works unchanged, and a Unix-socket capability
URL is rewritten to its socket under `/run/proctor`. Any other address is unreachable.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import json
import os
import shutil
import subprocess
import sys
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path

from .._errors import RolloutError
from .._resource import AsyncResource
from .._tempdirs import owned_tempdir
from .._uids import fresh_uid
from .._urls import host_port, unix_path, with_unix_path

JAIL_UID = 65534  # the harness's uid inside an unprivileged user namespace (nobody)
HOME = "/home/harness"
SOCKETS = "/run/proctor"  # the driver's forwarding sockets, inside the jail
SYSTEM = ("/usr", "/bin", "/sbin", "/lib", "/lib32", "/lib64", "/libx32", "/etc")
_LOOPBACK = ("127.0.0.1", "localhost")
_BOOT = "import os,sys;exec(compile(os.read(int(sys.argv[1]),1<<22),'proctor-jail','exec'))"
_CHUNK = 1 << 16
_MAX_CONNS = 256  # relayed connections open at once per jail: the driver's fds are shared


def find_bwrap() -> str:
    """The bubblewrap executable.

    Raises:
        RolloutError: it is not installed (the message names both ways out).
    """
    found = shutil.which("bwrap")
    if found is None:
        raise RolloutError(
            "bwrap (bubblewrap) not found: the harness runs in a bubblewrap jail; install it "
            "(apt-get install bubblewrap) or pass CommandAgent(..., jail=False) to run it "
            "unjailed (unsafe: it can then read the driver's environment and files)"
        )
    return found


@dataclass(frozen=True, slots=True)
class Forward:
    """One address the harness reaches through a socket the driver serves."""

    name: str  # the socket's file name in the jail's socket folder
    target: str  # where the driver connects: a Unix socket path, or host:port
    port: int | None  # the loopback port the jail listens on; None: a Unix socket


class Routes:
    """The harness's view of the driver's addresses, and the forwards that make it true."""

    def __init__(self) -> None:
        self.forwards: dict[str, Forward] = {}

    def url(self, url: str) -> str:
        """`url` as the harness reaches it from the jail (loopback and Unix sockets only)."""
        try:
            path = unix_path(url)
        except ValueError:
            return url
        if path is not None:
            if path not in self.forwards:
                name = f"u{len(self.forwards)}.sock"
                self.forwards[path] = Forward(name, path, None)
            return with_unix_path(url, f"{SOCKETS}/{self.forwards[path].name}")
        try:
            host, port = host_port(url)
        except ValueError:
            return url
        key = f"tcp:{port}"  # one listener per port in the jail, whatever the host's name
        if host in _LOOPBACK and key not in self.forwards:
            self.forwards[key] = Forward(f"t{port}.sock", f"{host}:{port}", port)
        return url


class Jail(AsyncResource):
    """One start of a harness in a fresh jail: the bwrap command, its fds and forwarders.

    `async with` makes the socket folder and serves the forwards; leaving it stops
    them and removes the folder.
    """

    def __init__(
        self,
        argv: Sequence[str],
        env: dict[str, str],
        *,
        cwd: str,
        binds: Iterable[Path],
        writable: Iterable[Path],
        routes: Routes,
        tmpfs_size: int | None,
    ) -> None:
        self.bwrap = find_bwrap()
        self.tmpfs_size = tmpfs_size
        self.argv = list(argv)
        self.env = env
        self.cwd = cwd
        self.routes = routes
        self.as_root = os.geteuid() == 0
        # The harness's uid: as root a fresh one on the host; else inside its namespace.
        self.uid = fresh_uid() if self.as_root else JAIL_UID
        path = env.get("PATH", os.defpath)
        self.mounts = _mounts(self.argv, cwd, path, binds, writable, self.as_root)
        self.base: str | None = None
        self.fds: list[int] = []
        self.lifeline = -1
        self._servers: list[asyncio.Server] = []
        self._conns: set[asyncio.StreamWriter] = set()
        self._relays = 0

    async def start(self) -> None:
        """Serve the forwarded sockets and prepare the jail's init (its code, setup, lifeline)."""
        try:
            self.base = private_folder("jail")  # 0700: the host's way in
            sockets = os.path.join(self.base, "s")
            os.mkdir(sockets, 0o711)  # bound read-only: the jail connects, never writes
            for fwd in self.routes.forwards.values():
                await self._serve(fwd, os.path.join(sockets, fwd.name))
            self.fds = [_memfd("code", _init_source()), _memfd("setup", self._setup())]
            read, self.lifeline = os.pipe()
            self.fds.append(read)
        except BaseException:
            await self.aclose()
            raise

    async def aclose(self) -> None:
        """Close what the jail was handed and serve no more; remove its folder."""
        self.started()
        self.hang_up()
        for server in self._servers:
            server.close()
        for writer in self._conns:
            writer.close()
        self._servers.clear()
        if self.base is not None:
            shutil.rmtree(self.base, ignore_errors=True)
            self.base = None

    def started(self) -> None:
        """Close the fds only the jail needs (call once bwrap has them)."""
        for fd in self.fds:
            os.close(fd)
        self.fds = []

    def hang_up(self) -> None:
        """Close the lifeline: the jail's init sends the harness's process group SIGTERM."""
        if self.lifeline >= 0:
            os.close(self.lifeline)
            self.lifeline = -1

    def command(self) -> list[str]:
        """The bwrap command line (nothing secret: the environment goes through a memfd)."""
        argv = [self.bwrap, "--unshare-pid", "--unshare-ipc", "--unshare-uts", "--unshare-net"]
        argv += ["--unshare-cgroup-try", "--die-with-parent", "--new-session"]
        argv += ["--hostname", "harness", "--cap-drop", "ALL"]
        if self.as_root:  # for _jail_init until it drops to the jail's uid
            for cap in ("CAP_SETUID", "CAP_SETGID", "CAP_CHOWN", "CAP_SETPCAP"):
                argv += ["--cap-add", cap]
        else:
            argv += ["--unshare-user", "--uid", str(JAIL_UID), "--gid", str(JAIL_UID)]
            if "--disable-userns" in _options(self.bwrap):  # bubblewrap 0.8 and later
                argv += ["--disable-userns"]
        argv += ["--clearenv", *self._filesystem(), "--remount-ro", "/", "--chdir", self.cwd]
        fds = [str(fd) for fd in self.fds]
        return [*argv, "--", os.path.realpath(sys.executable), "-I", "-S", "-c", _BOOT, *fds]

    def _filesystem(self) -> list[str]:
        assert self.base is not None
        size = []
        if self.tmpfs_size is not None and "--size" in _options(self.bwrap):
            size = ["--size", str(self.tmpfs_size)]
        argv = ["--proc", "/proc", "--dev", "/dev"]
        for point in ("/tmp", "/dev/shm"):
            argv += [*size, "--perms", "1777", "--tmpfs", point]
        for path in SYSTEM:
            if os.path.islink(path):
                argv += ["--symlink", os.readlink(path), path]
            elif os.path.isdir(path):
                argv += ["--ro-bind", path, path]
        made = {"/", "/tmp", "/dev", "/proc", *SYSTEM}  # folders the jail has
        binds = list(SYSTEM)  # below these, the host's folders show
        mounts = [(*size, "--perms", "0700", "--tmpfs", HOME), *self.mounts]
        mounts.append(("--ro-bind", os.path.join(self.base, "s"), SOCKETS))
        for *option, dest in mounts:
            argv += _parents(dest, made, binds)
            argv += [*option, dest]
            made.add(dest)
            if option[-1] != "--tmpfs":
                binds.append(dest)
        return argv

    def _setup(self) -> bytes:
        forward = [
            [fwd.port, f"{SOCKETS}/{fwd.name}"]
            for fwd in self.routes.forwards.values()
            if fwd.port is not None
        ]
        setup = {
            "argv": self.argv,
            "env": self.env,
            "cwd": self.cwd,
            "home": HOME,
            "user": [self.uid, self.uid] if self.as_root else None,
            "forward": forward,
        }
        return json.dumps(setup).encode()

    async def _serve(self, fwd: Forward, path: str) -> None:
        server = await asyncio.start_unix_server(functools.partial(self._relay, fwd), path)
        self._servers.append(server)
        os.chmod(path, 0o666)  # the jail user's way in; the 0700 folder above keeps others out

    async def _relay(
        self, fwd: Forward, reader: asyncio.StreamReader, writer: asyncio.StreamWriter
    ) -> None:
        """Join one connection from the jail to `fwd`'s target, both ways."""
        if self._relays >= _MAX_CONNS:
            writer.close()
            return
        self._relays += 1
        ends = [writer]
        self._conns.add(writer)
        try:
            with contextlib.suppress(OSError):  # refused, or a reset: both ends close
                if fwd.port is None:
                    up_reader, up_writer = await asyncio.open_unix_connection(fwd.target)
                else:
                    up_reader, up_writer = await asyncio.open_connection(*host_port(fwd.target))
                ends.append(up_writer)
                self._conns.add(up_writer)
                await asyncio.gather(_pump(reader, up_writer), _pump(up_reader, writer))
        finally:
            self._relays -= 1
            for end in ends:
                end.close()
                self._conns.discard(end)


async def _pump(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
    while data := await reader.read(_CHUNK):
        writer.write(data)
        await writer.drain()
    if writer.can_write_eof():
        writer.write_eof()


def _mounts(
    argv: list[str],
    cwd: str,
    path: str,
    binds: Iterable[Path],
    writable: Iterable[Path],
    as_root: bool,
) -> list[tuple[str, str, str]]:
    """(bwrap option, source, destination) for every bind, parents first.

    Raises:
        RolloutError: the working directory is the driver's home folder or above it, or
            (as root) closed to the jail user.
    """
    if cwd != "/" and _holds_home(cwd):
        raise RolloutError(
            f"the harness's working directory {cwd} is (or holds) the home folder "
            f"{_home()}, which the jail would show it; pass CommandAgent(cwd=...) a project "
            "folder"
        )
    if as_root and os.path.isdir(cwd) and os.stat(cwd).st_mode & 0o005 != 0o005:
        raise RolloutError(
            f"the harness's working directory {cwd} is closed to the jail user (a uid of "
            "its own); allow others in (chmod o+rx) or pass another cwd"
        )
    rw = {os.path.abspath(p) for p in writable}
    ro = {os.path.abspath(p) for p in binds}
    ro |= _python_prefixes()
    ro |= _program_folders(argv, cwd, path)
    if cwd != "/":
        ro.add(cwd)
    ro = {p for p in ro if not _under(p, SYSTEM) and not _under(p, rw) and os.path.exists(p)}
    kept = [p for p in ro if not any(p != q and _under(p, [q]) for q in ro)]
    mounts = [("--ro-bind", os.path.realpath(p), p) for p in kept]
    mounts += [("--bind", os.path.realpath(p), p) for p in rw]
    return sorted(mounts, key=lambda m: m[2])


def _python_prefixes() -> set[str]:
    """What the driver's interpreter needs to run `_jail_init` (its standard library)."""
    prefixes = {sys.prefix, sys.base_prefix, os.path.dirname(os.path.realpath(sys.executable))}
    return {os.path.realpath(p) for p in prefixes}


def _program_folders(argv: list[str], cwd: str, path: str) -> set[str]:
    """The harness program's install prefix and the folders its arguments name.

    A folder that is (or holds) the driver's home is never bound: the file alone is.
    """
    found: set[str] = set()
    program = argv[0] if "/" not in argv[0] else os.path.join(cwd, argv[0])
    where = shutil.which(program, path=path)
    if where is not None:
        for exe in {os.path.abspath(where), os.path.realpath(where)}:
            folder = os.path.dirname(exe)
            if os.path.basename(folder) == "bin":
                folder = os.path.dirname(folder)
            found.add(exe if _holds_home(folder) else folder)
    for arg in argv[1:]:
        if os.path.isabs(arg) and os.path.exists(arg):
            folder = arg if os.path.isdir(arg) else os.path.dirname(arg)
            if not _holds_home(folder):
                found.add(folder)
            elif not os.path.isdir(arg):
                found.add(arg)
    return {os.path.abspath(p) for p in found}


def _parents(dest: str, made: set[str], binds: list[str]) -> list[str]:
    """`--dir` options making `dest`'s missing parents traversable (bwrap makes them 0700).

    Parents under a bind exist already (the host's); under a tmpfs they are made.
    """
    options: list[str] = []
    parts = dest.strip("/").split("/")[:-1]
    for i in range(len(parts)):
        parent = "/" + "/".join(parts[: i + 1])
        if parent in made or _under(parent, binds):
            continue
        options += ["--perms", "0755", "--dir", parent]
        made.add(parent)
    return options


def _home() -> str:
    return os.path.realpath(os.path.expanduser("~"))


def _holds_home(path: str) -> bool:
    return _under(_home(), [os.path.realpath(path)])


def _under(path: str, roots: Iterable[str]) -> bool:
    return any(path == r or path.startswith(r.rstrip("/") + "/") for r in roots)


def private_folder(kind: str) -> str:
    """A fresh 0700 temp folder `proctor-<kind>-<pid>-<start>-*`; first removes those of
    this kind that a dead process of this uid left behind (a driver killed with -9)."""
    return owned_tempdir(kind)


def _memfd(name: str, data: bytes) -> int:
    fd = os.memfd_create(f"proctor-jail-{name}")
    try:
        os.write(fd, data)
        os.lseek(fd, 0, os.SEEK_SET)
    except BaseException:
        os.close(fd)
        raise
    return fd


@functools.cache
def _options(bwrap: str) -> str:
    """`bwrap --help`, to ask whether an option is known."""
    try:
        done = subprocess.run([bwrap, "--help"], capture_output=True, text=True, timeout=10)
    except (OSError, subprocess.TimeoutExpired):
        return ""
    return done.stdout + done.stderr


@functools.cache
def _init_source() -> bytes:
    return Path(__file__).with_name("_jail_init.py").read_bytes()
