"""The warm-pool zygote: load an environment once, fork one served child per request.

`SubprocessRuntime(warm=N)` runs `python -m proctor.runtimes._zygote SOURCE --ctl FD
--lifeline FD [--env NAME]` (Linux only). The zygote imports proctor and the source,
refuses to go on if that left it with more than one thread, prints `READY` on stdout,
then serves requests on `--ctl`, a `SOCK_SEQPACKET` Unix socket whose other end the
runtime holds. Every message is one packet of space-separated words:

    runtime -> zygote   REQUEST SECRET          fork a child for this request
    zygote  -> runtime  forked REQUEST PID      right after the fork
    child   -> runtime  ready REQUEST PID PORT  serving on 127.0.0.1:PORT
    child   -> runtime  error REQUEST PID WHY   failed before serving

A child leads its own session, runs the initialize hooks, binds a fresh port, serves
one rollout's connections (each must present SECRET as its token), and on SIGTERM runs
the shutdown hooks and exits. Its stdout and stderr go to the zygote's stderr. It does
not die with the zygote: a zygote that is killed mid-job leaves its children serving
their rollouts. It dies with the runtime instead: `--lifeline` is the read end of a
pipe whose write end only the runtime holds, so when the runtime closes it (or its
process dies) every child stops as on SIGTERM. The zygote exits when the runtime closes `--ctl`.

Forking a loaded, single-threaded interpreter costs a few milliseconds where a fresh
one costs ~20 ms bare and ~200 ms once proctor and its dependencies are imported.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import gc
import os
import signal
import socket
import sys
import threading
import traceback
from collections.abc import Callable

from .._errors import ProctorError
from ..channel._serve import serve
from ..env._environment import Environment
from ._local import find_environment

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
    while packet := ctl.recv(256):
        request, _, secret = packet.decode(errors="replace").partition(" ")
        pid = os.fork()
        if pid == 0:
            _child(request, secret, env, ctl, args.lifeline)  # never returns
        ctl.send(f"forked {request} {pid}".encode())
    return 0


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


def _child(request: str, secret: str, env: Environment, ctl: socket.socket, lifeline: int) -> None:
    code = 1
    pid = os.getpid()

    def announce(port: int) -> None:
        ctl.send(f"ready {request} {pid} {port}".encode())
        ctl.close()

    try:
        os.setsid()
        for sig in (signal.SIGCHLD, signal.SIGINT):
            signal.signal(sig, signal.SIG_DFL)
        os.dup2(2, 1)  # the environment's prints go to the log, not the zygote's stdout
        null = os.open(os.devnull, os.O_RDONLY)
        os.dup2(null, 0)
        os.close(null)
        asyncio.run(_serve(env, secret, lifeline, announce))
        code = 0
    except BaseException as exc:
        if ctl.fileno() != -1:
            why = f"{type(exc).__name__}: {exc}".replace("\n", " ")
            with contextlib.suppress(OSError):
                ctl.send(f"error {request} {pid} {why}".encode()[:4096])
        traceback.print_exc()
    finally:
        with contextlib.suppress(Exception):
            sys.stdout.flush()
            sys.stderr.flush()
        os._exit(code)


async def _serve(
    env: Environment, secret: str, lifeline: int, announce: Callable[[int], None]
) -> None:
    loop = asyncio.get_running_loop()

    def runtime_gone() -> None:  # the lifeline's write end closed: stop as on SIGTERM
        loop.remove_reader(lifeline)
        signal.raise_signal(signal.SIGTERM)

    # Runs once serve() is waiting, so its SIGTERM handler is in place by then.
    loop.add_reader(lifeline, runtime_gone)
    await serve(env, token=secret or None, announce=announce)


if __name__ == "__main__":
    sys.exit(main())
