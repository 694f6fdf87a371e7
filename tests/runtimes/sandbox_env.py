"""An environment that probes the sandbox it runs in (for test_sandbox_runtime.py).

Each template reports what it found as its prompt (JSON). With `PROBE_OUT` set to a
writable folder, a started task writes `started-<tag>` there (its pid namespace) and the
shutdown hooks write `shutdown-<pid namespace inode>`, so the host can see both.
"""

from __future__ import annotations

import asyncio
import errno
import json
import os
import socket
import sys
from collections.abc import AsyncGenerator
from pathlib import Path
from typing import Any

from proctor.env import Environment

env = Environment("sandbox-probe")
env.add_shell()

HERE = Path(__file__).resolve().parent


def _ns(kind: str) -> str:
    return os.readlink(f"/proc/self/ns/{kind}")


def _out(name: str, text: str = "") -> None:
    folder = os.environ.get("PROBE_OUT")
    if folder:
        Path(folder, name).write_text(text)


@env.shutdown
def _shutdown() -> None:
    _out(f"shutdown-{_ns('pid').strip('pid:[]')}")


def _outcome(action: Any) -> str:
    try:
        action()
    except OSError as exc:
        return errno.errorcode.get(exc.errno or 0, type(exc).__name__)
    return "ok"


def _write(path: str) -> str:
    return _outcome(lambda: Path(path).write_text("x"))


def _read(path: str) -> str:
    return _outcome(lambda: Path(path).read_bytes())


def _connect(port: int) -> str:
    def dial() -> None:
        with socket.create_connection(("127.0.0.1", port), timeout=2):
            pass

    return _outcome(dial)


def _status(key: str) -> str:
    lines = Path("/proc/self/status").read_text().splitlines()
    return next(line.split(":", 1)[1].strip() for line in lines if line.startswith(key + ":"))


@env.template
async def probe(secret: str = "", port: int = 0) -> AsyncGenerator[Any, Any]:
    """Who am I, what can I write, read and reach."""
    targets = {
        "workdir": os.path.join(os.getcwd(), "f"),
        "tmp": "/tmp/f",
        "shm": "/dev/shm/f",
        "root": "/f",
        "dev": "/dev/f",
        "usr": "/usr/f",
        "etc": "/etc/f",
        "venv": os.path.join(sys.prefix, "f"),
        "source": str(HERE / "f"),
    }
    report = {
        "tmp": sorted(os.listdir("/tmp")),  # before writing there
        "uid": os.getuid(),
        "gid": os.getgid(),
        "groups": os.getgroups(),
        "cap_eff": _status("CapEff"),
        "cap_bnd": _status("CapBnd"),
        "no_new_privs": _status("NoNewPrivs"),
        "cwd": os.getcwd(),
        "home": os.environ.get("HOME"),
        "env": sorted(os.environ),
        "hostname": socket.gethostname(),
        "pidns": _ns("pid"),
        "pids": sorted(int(p) for p in os.listdir("/proc") if p.isdigit()),
        "interfaces": sorted(name for _, name in socket.if_nameindex()),
        "write": {name: _write(path) for name, path in targets.items()},
        "read": {"secret": _read(secret) if secret else "", "shadow": _read("/etc/shadow")},
        "connect": _connect(port) if port else "",
    }
    yield json.dumps(report)
    yield 1.0


@env.template
async def forkbomb() -> AsyncGenerator[Any, Any]:
    """Fork children (which wait) until the kernel refuses; report how many and why."""
    hold, release = os.pipe()
    forked, error = 0, ""
    while forked < 10_000:
        try:
            pid = os.fork()
        except OSError as exc:
            error = errno.errorcode.get(exc.errno or 0, str(exc))
            break
        if pid == 0:
            os.close(release)
            os.read(hold, 1)  # until the sandbox ends
            os._exit(0)
        forked += 1
    yield json.dumps({"forked": forked, "error": error, "pidns": _ns("pid")})
    yield 1.0


@env.template
async def linger(tag: str) -> AsyncGenerator[Any, Any]:
    """Leave a process behind that ignores SIGTERM and left our session, then wait."""
    code = "import signal, time; signal.signal(signal.SIGTERM, signal.SIG_IGN); time.sleep(600)"
    await asyncio.create_subprocess_exec(sys.executable, "-c", code, start_new_session=True)
    _out(f"started-{tag}", _ns("pid"))
    yield json.dumps({"pidns": _ns("pid")})
    yield 1.0


@env.template
async def stall(tag: str) -> AsyncGenerator[Any, Any]:
    """Record that the task started, then never give a prompt (for start timeouts)."""
    _out(f"started-{tag}", _ns("pid"))
    await asyncio.Event().wait()
    yield "never"


@env.template
async def allocate(megabytes: int) -> AsyncGenerator[Any, Any]:
    """Try to allocate that much memory."""
    try:
        block = bytearray(megabytes << 20)
        outcome = f"ok {len(block)}"
    except MemoryError:
        outcome = "MemoryError"
    yield outcome
    yield 1.0


@env.template
async def burn() -> AsyncGenerator[Any, Any]:
    """Spin a child on the CPU until a limit ends it; report how it ended."""
    child = await asyncio.create_subprocess_exec(sys.executable, "-c", "while True: pass")
    yield str(await child.wait())
    yield 1.0


@env.template
async def fill(folder: str, megabytes: int = 1536) -> AsyncGenerator[Any, Any]:
    """Write up to `megabytes` into `folder` (files of 256 MiB); report how far it got."""
    chunk, written, error = b"\0" * (1 << 20), 0, ""
    try:
        for n in range(0, megabytes, 256):
            with open(os.path.join(folder, f"fill-{n}"), "wb") as f:  # noqa: ASYNC230
                for _ in range(min(256, megabytes - n)):
                    f.write(chunk)
                    f.flush()
                    written += 1
    except OSError as exc:
        error = errno.errorcode.get(exc.errno or 0, str(exc))
    finally:
        for name in os.listdir(folder):
            if name.startswith("fill-"):
                os.unlink(os.path.join(folder, name))
    yield json.dumps({"megabytes": written, "error": error})
    yield 1.0


@env.template
async def nested_userns() -> AsyncGenerator[Any, Any]:
    """Try to make a user namespace of our own (`unshare -U`), as a program would."""
    proc = await asyncio.create_subprocess_exec(
        "unshare", "-U", "true", stderr=asyncio.subprocess.PIPE
    )
    _, err = await proc.communicate()
    yield json.dumps({"code": proc.returncode, "stderr": err.decode(errors="replace")})
    yield 1.0
