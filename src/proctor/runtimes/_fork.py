"""Zygotes: the request loop and a forked child's life, shared by both warm runtimes.

A zygote (`_zygote` for `SubprocessRuntime`, `_sandbox_inside` for `SandboxRuntime`)
has loaded an environment once; it reads requests on its control socket (a
`SOCK_SEQPACKET` Unix socket whose other end the runtime holds): each is one JSON packet
with the rollout's own channel attached (see `_warm` for what the child says on it).
`serve_requests` runs that loop, `fork_watched` forks a child that waits until the
runtime holds its pidfd, and `rollout_child` is the child's whole life: read its token
from the channel, lead its own session, prepare, serve, report, exit.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import signal
import socket
import sys
import traceback
from collections.abc import Callable, Coroutine
from typing import Any, NoReturn

from .._errors import TeardownError
from ..serve import SHUTDOWN_FAILED

__all__ = ["Announce", "fork_watched", "report", "rollout_child", "serve_requests"]

Announce = Callable[[int | None], None]


def serve_requests(
    ctl: socket.socket, fork: Callable[[dict[str, Any], socket.socket], None]
) -> int:
    """Call `fork(request, channel)` for each request on `ctl` until the runtime closes it."""
    while True:
        data, fds, _, _ = socket.recv_fds(ctl, 65536, 1)
        with contextlib.suppress(ChildProcessError):
            while os.waitpid(-1, os.WNOHANG)[0]:
                pass  # earlier children that exited (none where SIGCHLD is ignored)
        if not data:
            for fd in fds:
                os.close(fd)
            return 0  # the runtime closed its end (or died)
        if not fds:
            continue
        channel = socket.socket(fileno=fds[0])
        channel.set_inheritable(False)
        try:
            request = json.loads(data)
            fork(request if isinstance(request, dict) else {}, channel)
        except (OSError, ValueError) as exc:
            report(channel, {"error": f"cannot fork a rollout: {exc}"})
        finally:
            channel.close()


def fork_watched(channel: socket.socket, run: Callable[[], NoReturn]) -> int:
    """Fork a child that runs `run` once its pidfd is on its way to the runtime.

    So nothing the child runs can speak on the channel, or exit, before the runtime
    can watch it. Returns the child's pid.
    """
    wait, go = os.pipe()
    pid = os.fork()
    if pid == 0:
        os.close(go)
        os.read(wait, 1)
        os.close(wait)
        run()
    os.close(wait)
    try:
        pidfd = os.pidfd_open(pid)
        try:
            socket.send_fds(channel, [json.dumps({"pid": pid}).encode()], [pidfd])
        finally:
            os.close(pidfd)
    except OSError:  # the runtime gave up on it: the child finds its channel closed
        pass
    finally:
        os.close(go)
    return pid


def rollout_child(
    channel: socket.socket,
    prepare: Callable[[], None],
    serving: Callable[[str, Announce], Coroutine[Any, Any, None]],
) -> NoReturn:
    """A forked child's life: its token, its own session, `prepare`, then `serving`.

    Reports on `channel` that it serves, or why it failed before, or (once serving)
    that its shutdown hooks failed; then exits without returning to the zygote's code.
    """
    code = 1
    announced = False

    def ready(port: int | None) -> None:
        nonlocal announced
        report(channel, {"ready": port})
        announced = True

    try:
        token = json.loads(channel.recv(4096))["token"]  # sent by the runtime with the request
        os.setsid()
        for sig in (signal.SIGCHLD, signal.SIGINT):
            signal.signal(sig, signal.SIG_DFL)
        prepare()
        os.dup2(2, 1)  # the environment's prints go to the log, not the zygote's stdout
        null = os.open(os.devnull, os.O_RDONLY)
        os.dup2(null, 0)
        os.close(null)
        asyncio.run(serving(token, ready))
        code = 0
    except BaseException as exc:
        if not announced:
            report(channel, {"error": f"{type(exc).__name__}: {exc}"})
        elif isinstance(exc, TeardownError):  # read by the runtime once we are gone
            report(channel, {"teardown_error": str(exc).removeprefix(SHUTDOWN_FAILED)})
        traceback.print_exc()
    finally:
        with contextlib.suppress(Exception):
            sys.stdout.flush()
            sys.stderr.flush()
        os._exit(code)


def report(channel: socket.socket, msg: dict[str, Any]) -> None:
    """Send one message to the runtime on a rollout's channel (if it still listens)."""
    with contextlib.suppress(OSError):
        channel.send(json.dumps(msg).encode()[:65536])
