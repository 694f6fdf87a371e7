"""The warm pool's zygote: load an environment once, fork one served child per request.

`SubprocessRuntime(warm=N)` runs `python -m proctor.runtimes._zygote SOURCE --ctl FD
--lifeline FD [--env NAME]` (Linux only). That zygote imports proctor and the source,
refuses to go on if that left it with more than one thread, prints `READY` on stdout,
then forks a child per request (`_fork`: the request loop and the child's life shared
with the sandbox's zygote). The zygote runs behind the runtime's walls (`_isolate`), and
each child enters a user, pid and mount namespace of its own (private /proc, /tmp and
HOME, no capabilities), where it is pid 1: no rollout sees another's files or processes.
A child serves one rollout's connections on a fresh loopback port and on SIGTERM runs
the shutdown hooks and exits. Its stdout and stderr
go to the zygote's stderr. It does not die with the zygote: a zygote that is killed
mid-job leaves its children serving their rollouts. It dies with the runtime instead:
`--lifeline` is the read end of a pipe whose write end only the runtime holds, so when
the runtime closes it (or its process dies) every child stops as on SIGTERM. The
zygote exits when the runtime closes `--ctl`. (`SandboxRuntime`'s zygote runs inside its
sandbox: `_sandbox_inside`.)

Forking a loaded, single-threaded interpreter costs a few milliseconds where a fresh
one costs ~10 ms bare and ~100 ms once it serves (asyncio alone ~40).
"""

from __future__ import annotations

import argparse
import asyncio
import gc
import os
import signal
import socket
import sys
import threading
from typing import TYPE_CHECKING, Any, NoReturn

from .._errors import ProctorError
from .._loader import find_environment
from ..serve import serve
from ._fork import Announce, fork_watched, report, rollout_child, serve_requests
from ._isolate import isolate_rollout, seal_rollout

if TYPE_CHECKING:
    from ..env import Environment

READY = b"READY"


def main(argv: list[str] | None = None) -> int:
    """Load the source, then fork a served child for each request on the control socket."""
    parser = argparse.ArgumentParser(prog="python -m proctor.runtimes._zygote")
    parser.add_argument("source")
    parser.add_argument("--env", dest="env_name", default=None)
    parser.add_argument("--ctl", type=int, required=True)
    parser.add_argument("--lifeline", type=int, required=True)
    args = parser.parse_args(argv)
    try:
        env = find_environment(args.source, args.env_name)
    except ProctorError as exc:
        print(f"error: {exc}", file=sys.stderr, flush=True)
        return 1
    threads = other_threads()
    if threads:
        print(f"error: {_threaded(args.source, threads)}", file=sys.stderr, flush=True)
        return 1
    signal.signal(signal.SIGCHLD, signal.SIG_IGN)  # children are reaped by the kernel
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # the runtime decides when we stop
    ctl = socket.socket(fileno=args.ctl)
    gc.freeze()  # the children's collections then skip (and do not copy) what is loaded
    sys.stdout.flush()  # else every child would flush the import's prints again
    sys.stderr.flush()
    os.write(1, READY + b"\n")

    cwd = os.getcwd()

    def fork(request: dict[str, Any], channel: socket.socket) -> None:
        if os.fork() == 0:
            _isolated(env, ctl, channel, args.lifeline, cwd)

    return serve_requests(ctl, fork)


def _isolated(
    env: Environment, ctl: socket.socket, channel: socket.socket, lifeline: int, cwd: str
) -> NoReturn:
    """Namespaces of the rollout's own, then its server: the first process in them."""
    ctl.close()  # the zygote's socket is not the child's to use
    try:
        isolate_rollout()
        fork_watched(channel, lambda: _child(env, channel, lifeline, cwd))
    except BaseException as exc:
        report(channel, {"error": f"cannot isolate the rollout: {exc}"})
        os._exit(1)
    os._exit(0)


def _child(env: Environment, channel: socket.socket, lifeline: int, cwd: str) -> NoReturn:
    async def serving(token: str, announce: Announce) -> None:
        loop = asyncio.get_running_loop()

        def runtime_gone() -> None:  # the lifeline's write end closed: stop as on SIGTERM
            loop.remove_reader(lifeline)
            signal.raise_signal(signal.SIGTERM)

        # Runs once serve() is waiting, so its SIGTERM handler is in place by then.
        loop.add_reader(lifeline, runtime_gone)
        await serve(env, token=token or None, announce=announce)

    rollout_child(channel, lambda: seal_rollout(cwd), serving)


def other_threads() -> list[str]:
    """Names of this process's threads besides the calling one (native ones included)."""
    me = threading.get_native_id()
    known = {t.native_id: t.name for t in threading.enumerate()}
    try:
        tids = [int(t) for t in os.listdir("/proc/self/task")]
    except OSError:  # no /proc: only the threads Python knows of
        return [name for tid, name in known.items() if tid != me]
    return [known.get(tid) or _comm(tid) for tid in tids if tid != me]


def _comm(tid: int) -> str:
    try:
        with open(f"/proc/self/task/{tid}/comm") as f:
            return f.read().strip()
    except OSError:  # it ended meanwhile
        return "?"


def _threaded(source: str, threads: list[str]) -> str:
    return (
        f"loading {source} left the warm-pool zygote with {len(threads)} other thread(s) "
        f"({', '.join(threads)}); forking a threaded process copies locks other threads "
        "hold, so the zygote must stay single-threaded. Start threads, thread pools and "
        "clients in an initialize hook instead of at import (for BLAS libraries, set "
        "OMP_NUM_THREADS=1 / OPENBLAS_NUM_THREADS=1), or use warm=False."
    )


if __name__ == "__main__":
    sys.exit(main())
