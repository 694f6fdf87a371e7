"""The warm-pool zygote: load an environment once, fork one served child per request.

`SubprocessRuntime(warm=True)` runs `python -m proctor.runtimes._zygote SOURCE [--env N]`.
On its pipes: it prints `READY` once the source is loaded; each `TOKEN` line on stdin
forks a child that serves the environment on a fresh port (initialize hooks, bind,
serve, shutdown hooks on SIGTERM) and prints `TOKEN PID PORT` (or `TOKEN PID ERR why`).
A child leads its own session, writes its other output to stderr, and dies with the
zygote (PR_SET_PDEATHSIG); the zygote exits when its stdin closes, so nothing outlives
the process that started it. Forking a loaded interpreter costs a few milliseconds
where a fresh one costs ~80.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import ctypes
import os
import signal
import sys
import traceback

from .._errors import ProctorError
from ..env._environment import Environment
from ..serve import serve
from ._local import find_environment

_PR_SET_PDEATHSIG = 1


def main(argv: list[str] | None = None) -> int:
    """Load the source, then fork a served child for each token read from stdin."""
    parser = argparse.ArgumentParser(prog="python -m proctor.runtimes._zygote")
    parser.add_argument("source")
    parser.add_argument("--env", dest="env_name", default=None)
    args = parser.parse_args(argv)
    try:
        env = find_environment(args.source, args.env_name)
    except ProctorError as exc:
        print(f"error: {exc}", file=sys.stderr, flush=True)
        return 1
    signal.signal(signal.SIGCHLD, signal.SIG_IGN)  # children are reaped by the kernel
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # the parent decides when we stop
    zygote = os.getpid()
    sys.stderr.flush()
    os.write(1, b"READY\n")
    for line in sys.stdin.buffer:
        token = line.strip().decode(errors="replace")
        if token and os.fork() == 0:
            _child(token, env, zygote)  # never returns
    return 0


def _child(token: str, env: Environment, zygote: int) -> None:
    code = 1
    ctl = os.dup(1)
    announced = False

    def announce(port: int) -> None:
        nonlocal announced
        os.write(ctl, f"{token} {os.getpid()} {port}\n".encode())
        announced = True

    try:
        os.setsid()
        for sig in (signal.SIGCHLD, signal.SIGINT):
            signal.signal(sig, signal.SIG_DFL)
        _die_with(zygote)
        os.dup2(2, 1)  # the environment's prints go to the log, not the control pipe
        null = os.open(os.devnull, os.O_RDONLY)
        os.dup2(null, 0)
        os.close(null)
        asyncio.run(serve(env, announce=announce))
        code = 0
    except BaseException as exc:
        if not announced:
            why = f"{type(exc).__name__}: {exc}".replace("\n", " ")
            with contextlib.suppress(OSError):
                os.write(ctl, f"{token} {os.getpid()} ERR {why}\n".encode())
        traceback.print_exc()
    finally:
        with contextlib.suppress(Exception):
            sys.stdout.flush()
            sys.stderr.flush()
        os._exit(code)


def _die_with(parent: int) -> None:
    """Ask the kernel to SIGTERM us when the zygote dies (Linux); bail if it already has."""
    with contextlib.suppress(OSError, AttributeError):
        ctypes.CDLL(None, use_errno=True).prctl(_PR_SET_PDEATHSIG, signal.SIGTERM)
    if os.getppid() != parent:
        os._exit(1)


if __name__ == "__main__":
    sys.exit(main())
