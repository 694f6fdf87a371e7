"""Inside a rollout's substrate: run a placed harness and relay its model connections.

`_placement` starts this as `python -I -S -c BOOT LENGTH` inside the sandbox or
container: this source arrives first on stdin (LENGTH bytes, so nothing of proctor need
be installed there), then frames both ways on stdin and stdout, each a header
`>BII` (kind, connection id, payload length) and its payload:

- driver -> here: SETUP (a JSON object: `argv`, `env`, `cwd`, `files`, `stdin`,
  `listen`, `urls`, `limits`, `grace`), then DATA, EOF and CLOSE of connections;
- here -> driver: OPEN (payload: the listener's index), DATA, EOF and CLOSE of
  connections, OUT (the harness's standard output), EXIT (its exit status, as text).

It listens on `127.0.0.1` (one port per address the driver relays, the interception
proxy session), points the URL variables in `urls` at them, writes `files` into a fresh
0700 folder (`PROCTOR_HARNESS`), sets `limits`, and runs the harness in a new session
with its standard error as this process's. Each accepted connection becomes an OPEN
the driver answers by dialling the proxy: no key, no route out and no listener but
these loopback ports enter the substrate. End of stdin (the driver stops the rollout,
or died) sends the harness's process group SIGTERM, SIGKILL after `grace` seconds.
Standard library only.
"""

from __future__ import annotations

import base64
import contextlib
import ctypes
import json
import os
import queue
import resource
import signal
import socket
import struct
import subprocess
import sys
import tempfile
import threading
import time

SETUP, DATA, EOF, CLOSE, OPEN, OUT, EXIT = range(1, 8)
HEADER = struct.Struct(">BII")
_CHUNK = 1 << 16
_MAX_CONNS = 256
_PR_SET_PDEATHSIG = 1
_PR_SET_NO_NEW_PRIVS = 38
_LIMITS = {
    "memory": resource.RLIMIT_AS,
    "processes": resource.RLIMIT_NPROC,
    "file_size": resource.RLIMIT_FSIZE,
}


class Mux:
    """Frames to the driver (one writer at a time) and the connections they carry."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.out = sys.stdout.buffer
        self.conns: dict[int, tuple[socket.socket, queue.SimpleQueue[bytes | None]]] = {}
        self.next_id = 1

    def send(self, kind: int, cid: int, data: bytes = b"") -> None:
        with self.lock:
            self.out.write(HEADER.pack(kind, cid, len(data)) + data)
            self.out.flush()

    def accept(self, listener: socket.socket, index: int) -> None:
        while True:
            try:
                conn, _ = listener.accept()
            except OSError:
                time.sleep(0.05)
                continue
            with self.lock:
                if len(self.conns) >= _MAX_CONNS:
                    conn.close()
                    continue
                cid, self.next_id = self.next_id, self.next_id + 1
                outbox: queue.SimpleQueue[bytes | None] = queue.SimpleQueue()
                self.conns[cid] = (conn, outbox)
            down = (cid, conn, outbox)
            try:
                threading.Thread(target=self.downstream, args=down, daemon=True).start()
            except RuntimeError:  # no thread to spare (the processes limit counts them)
                with self.lock:
                    self.conns.pop(cid, None)
                conn.close()
                continue
            self.send(OPEN, cid, str(index).encode())
            try:
                threading.Thread(target=self.upstream, args=(cid, conn), daemon=True).start()
            except RuntimeError:
                self.send(CLOSE, cid)
                outbox.put(None)

    def upstream(self, cid: int, conn: socket.socket) -> None:
        """The harness's bytes to the driver; its half-close as EOF, a reset as CLOSE."""
        try:
            while data := conn.recv(_CHUNK):
                self.send(DATA, cid, data)
            self.send(EOF, cid)
        except OSError:
            self.send(CLOSE, cid)

    def downstream(
        self, cid: int, conn: socket.socket, outbox: queue.SimpleQueue[bytes | None]
    ) -> None:
        """The driver's bytes to the harness, in order; None: the driver closed."""
        try:
            while (data := outbox.get()) is not None:
                if data:
                    conn.sendall(data)
                else:
                    conn.shutdown(socket.SHUT_WR)
        except OSError:
            self.send(CLOSE, cid)
        finally:
            with self.lock:
                self.conns.pop(cid, None)
            conn.close()

    def deliver(self, kind: int, cid: int, data: bytes) -> None:
        with self.lock:
            found = self.conns.get(cid)
        if found is None:
            return
        conn, outbox = found
        if kind == DATA and data:
            outbox.put(data)
        elif kind == EOF:
            outbox.put(b"")
        elif kind == CLOSE:
            with contextlib.suppress(OSError):
                conn.shutdown(socket.SHUT_RDWR)
            outbox.put(None)


def main() -> None:
    libc = ctypes.CDLL(None, use_errno=True)
    libc.prctl(_PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0)  # the exec client's death ends us
    libc.prctl(_PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0)
    stdin = sys.stdin.buffer
    kind, _, size = HEADER.unpack(_read(stdin, HEADER.size))
    if kind != SETUP:
        os._exit(2)
    setup = json.loads(_read(stdin, size))
    _set_limits(setup["limits"])
    mux = Mux()
    env = {k: v for k, v in os.environ.items() if k in ("PATH", "HOME", "LANG", "TERM", "TZ")}
    folder = tempfile.mkdtemp(prefix="proctor-harness-")
    for name, data in setup["files"].items():
        path = os.path.join(folder, name)
        with open(path, "wb") as file:
            file.write(base64.b64decode(data))
        os.chmod(path, 0o700)
    env["PROCTOR_HARNESS"] = folder
    listeners = [_listen() for _ in range(setup["listen"])]
    for var, (index, path) in setup["urls"].items():
        env[var] = f"http://127.0.0.1:{listeners[index].getsockname()[1]}{path}"
    env.update(setup["env"])
    for index, listener in enumerate(listeners):
        threading.Thread(target=mux.accept, args=(listener, index), daemon=True).start()
    argv = [_arg(a, folder) for a in setup["argv"]]
    try:
        proc = subprocess.Popen(
            argv,
            env=env,
            cwd=setup["cwd"] or os.getcwd(),
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            start_new_session=True,
        )
    except OSError as exc:
        print(f"cannot run {argv[0]}: {exc.strerror}", file=sys.stderr, flush=True)
        mux.send(EXIT, 0, b"127")
        os._exit(0)
    threading.Thread(
        target=_feed, args=(proc, base64.b64decode(setup["stdin"])), daemon=True
    ).start()
    threading.Thread(target=_frames, args=(stdin, mux, proc, setup["grace"]), daemon=True).start()
    assert proc.stdout is not None
    while data := os.read(proc.stdout.fileno(), _CHUNK):
        mux.send(OUT, 0, data)
    code = proc.wait()
    with contextlib.suppress(ProcessLookupError):
        os.killpg(proc.pid, signal.SIGKILL)  # whatever it left running
    mux.send(EXIT, 0, str(code if code >= 0 else 128 - code).encode())
    os._exit(0)


def _arg(arg: str | dict[str, str], folder: str) -> str:
    """An argv item: as is, a shipped file's copy, or `{python}`: this interpreter."""
    if isinstance(arg, str):
        return arg
    return sys.executable if "python" in arg else os.path.join(folder, arg["ship"])


def _read(stream: object, size: int) -> bytes:
    data = stream.read(size)  # type: ignore[attr-defined]
    if len(data) != size:
        os._exit(0)  # the driver went away
    return data  # type: ignore[no-any-return]


def _set_limits(limits: dict[str, int | float]) -> None:
    for name, which in _LIMITS.items():
        if name in limits:
            resource.setrlimit(which, (int(limits[name]), int(limits[name])))
    if "cpu_time" in limits:
        soft = int(-(-limits["cpu_time"] // 1))
        resource.setrlimit(resource.RLIMIT_CPU, (soft, soft + 1))


def _listen() -> socket.socket:
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.bind(("127.0.0.1", 0))
    sock.listen(128)
    return sock


def _feed(proc: subprocess.Popen[bytes], data: bytes) -> None:
    assert proc.stdin is not None
    with contextlib.suppress(OSError):
        proc.stdin.write(data)
    with contextlib.suppress(OSError):
        proc.stdin.close()


def _frames(stdin: object, mux: Mux, proc: subprocess.Popen[bytes], grace: float) -> None:
    """The driver's frames until its end of stdin; then stop the harness."""
    while True:
        head = stdin.read(HEADER.size)  # type: ignore[attr-defined]
        if len(head) != HEADER.size:
            break
        kind, cid, size = HEADER.unpack(head)
        data = stdin.read(size) if size else b""  # type: ignore[attr-defined]
        if len(data) != size:
            break
        mux.deliver(kind, cid, data)
    for sig, wait in ((signal.SIGTERM, grace), (signal.SIGKILL, None)):
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, sig)
        try:
            proc.wait(wait)
            break
        except subprocess.TimeoutExpired:
            continue
    os._exit(0)


if __name__ == "__main__":
    main()
