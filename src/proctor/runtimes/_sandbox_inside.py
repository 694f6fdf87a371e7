"""Inside `SandboxRuntime`'s sandboxes: the entry point, the rollouts, their isolation.

`python -m proctor.runtimes._sandbox_inside {serve,zygote,stage}`: a cold sandbox's
server (limits, then load and serve), the warm sandbox's zygote (load once, fork an
isolated rollout per request: new namespaces, private mounts, no capabilities, limits),
and the mount helper (binds staged, as root, in a private mount namespace).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import math
import os
import signal
import socket
import stat
import struct
import sys
from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any, NoReturn

from .._errors import ProctorError
from ._fork import Announce, fork_watched, report, rollout_child, serve_requests
from ._isolate import check as _check
from ._isolate import drop_privileges
from ._isolate import libc as _libc
from ._isolate import mount as _mount
from ._isolate import mounts_under as _binds_under
from ._sandbox_host import _ENTRY, _READY, CONTROL_DIR, WORKDIR, Network

if TYPE_CHECKING:
    from ..env import Environment

_CLONE_NEWNS = 0x00020000
_CLONE_NEWCGROUP = 0x02000000
_CLONE_NEWUTS = 0x04000000
_CLONE_NEWIPC = 0x08000000
_CLONE_NEWUSER = 0x10000000
_CLONE_NEWPID = 0x20000000
_CLONE_NEWNET = 0x40000000
_MS_RDONLY, _MS_NOSUID, _MS_NODEV, _MS_NOEXEC = 1, 2, 4, 8
_MS_BIND, _MS_REC, _MS_PRIVATE = 4096, 16384, 1 << 18
_SIOCGIFFLAGS, _SIOCSIFFLAGS, _IFF_UP = 0x8913, 0x8914, 0x1


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
    drop_privileges(None)


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

    def fork(request: dict[str, Any], channel: socket.socket) -> None:
        _fork(env, ctl, channel, request, args.network)

    return serve_requests(ctl, fork)  # at EOF the sandbox ends with us


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
        report(channel, {"error": f"cannot fork a rollout: {exc}"})
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
    """New namespaces, then a child that is the first process of the new pid namespace."""
    try:
        _unshare(network)
        fork_watched(channel, lambda: _rollout(env, channel, listener, limits, network))
    except BaseException as exc:
        report(channel, {"error": f"cannot isolate the rollout: {exc}"})
        os._exit(1)
    os._exit(0)


def _rollout(
    env: Environment,
    channel: socket.socket,
    listener: socket.socket | None,
    limits: Mapping[str, Any],
    network: Network,
) -> NoReturn:
    from ..serve import serve

    def prepare() -> None:
        _seal(network, limits.get("tmpfs"))
        _apply_limits(limits)

    async def serving(token: str, announce: Announce) -> None:
        await serve(
            env,
            unix=listener,
            token=token,
            announce=announce,
            announce_unix=lambda _: announce(None),
        )

    rollout_child(channel, prepare, serving)


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
    """`python -m proctor.runtimes._sandbox_inside {serve,zygote,stage} ...`, run by the runtime."""
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
