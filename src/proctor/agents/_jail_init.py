"""Inside a `CommandAgent` jail: forward loopback ports, drop to the jail user, run the harness.

`_jail` runs this as `python -I -S -c BOOT CODE_FD SETUP_FD LIFELINE_FD` inside
bubblewrap: this source arrives on CODE_FD (so nothing of proctor needs to be visible in
the jail) and SETUP_FD holds a JSON object: `argv`, `env` and `cwd` of the harness, its
`home`, `user` (`[uid, gid]` to drop to when started as root, else null) and `forward`
(`[[port, socket path], ...]`: loopback ports to listen on, each connection relayed to
the socket the driver serves). Nothing secret is ever in an argument. When the driver
closes LIFELINE_FD (or dies), the harness's process group gets SIGTERM. Standard library
only; every module is imported before the drop.
"""

from __future__ import annotations

import contextlib
import ctypes
import json
import os
import signal
import socket
import subprocess
import sys
import threading
import time

_PR_CAPBSET_DROP = 24
_CAP_VERSION_3 = 0x20080522
_CHUNK = 1 << 16


def main() -> None:
    code_fd, setup_fd, lifeline = (int(arg) for arg in sys.argv[1:4])
    os.close(code_fd)
    with os.fdopen(setup_fd, "rb") as file:
        setup = json.loads(file.read())
    listeners = [(_listen(port), path) for port, path in setup["forward"]]
    if setup["user"] is not None:
        _drop(setup["home"], *setup["user"])
    for listener, path in listeners:
        threading.Thread(target=_accept, args=(listener, path), daemon=True).start()
    try:
        proc = subprocess.Popen(
            setup["argv"], env=setup["env"], cwd=setup["cwd"], start_new_session=True
        )
    except OSError as exc:
        print(f"cannot run {setup['argv'][0]}: {exc.strerror}", file=sys.stderr, flush=True)
        os._exit(127)
    threading.Thread(target=_stop_on_eof, args=(lifeline, proc.pid), daemon=True).start()
    code = proc.wait()
    os._exit(code if code >= 0 else 128 - code)


def _drop(home: str, uid: int, gid: int) -> None:
    """Give the harness its home, empty the capability bounding set, become `uid`:`gid`.

    After `setresuid` away from root the permitted, effective and ambient sets are
    empty; the inheritable set is cleared; bubblewrap already set no_new_privs.
    """
    os.chown(home, uid, gid)
    libc = ctypes.CDLL(None, use_errno=True)
    with open("/proc/sys/kernel/cap_last_cap") as file:
        last = int(file.read())
    for cap in range(last + 1):
        if libc.prctl(_PR_CAPBSET_DROP, cap, 0, 0, 0) != 0:
            raise OSError(ctypes.get_errno(), "cannot drop the capability bounding set")
    os.setgroups([])
    os.setresgid(gid, gid, gid)
    os.setresuid(uid, uid, uid)
    header = (ctypes.c_uint32 * 2)(_CAP_VERSION_3, 0)
    if libc.capset(header, (ctypes.c_uint32 * 6)()) != 0:  # the inheritable set, too
        raise OSError(ctypes.get_errno(), "cannot clear the capability sets")


def _listen(port: int) -> socket.socket:
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.bind(("127.0.0.1", port))
    sock.listen(128)
    return sock


def _accept(listener: socket.socket, path: str) -> None:
    while True:
        try:
            conn, _ = listener.accept()
        except OSError:  # out of descriptors, say: the port stays open for later
            time.sleep(0.05)
            continue
        try:
            threading.Thread(target=_relay, args=(conn, path), daemon=True).start()
        except RuntimeError:  # no thread to spare
            conn.close()


def _relay(conn: socket.socket, path: str) -> None:
    """Join one loopback connection to the driver's socket, both ways, half-closes kept."""
    upstream = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    try:
        upstream.connect(path)
    except OSError:
        conn.close()
        upstream.close()
        return
    back = threading.Thread(target=_pump, args=(upstream, conn), daemon=True)
    back.start()
    _pump(conn, upstream)
    back.join()
    conn.close()
    upstream.close()


def _pump(src: socket.socket, dst: socket.socket) -> None:
    try:
        while data := src.recv(_CHUNK):
            dst.sendall(data)
        dst.shutdown(socket.SHUT_WR)
    except OSError:  # one side reset: end both directions
        for sock in (src, dst):
            with contextlib.suppress(OSError):
                sock.shutdown(socket.SHUT_RDWR)


def _stop_on_eof(lifeline: int, pid: int) -> None:
    while os.read(lifeline, 1):
        pass
    with contextlib.suppress(ProcessLookupError):
        os.killpg(pid, signal.SIGTERM)


if __name__ == "__main__":
    main()
