"""An environment that reports what its container lets it do (for test_container_runtime.py).

Served from this folder, mounted read-only at the same path inside the container.
"""

from __future__ import annotations

import errno
import json
import os
import socket
from collections.abc import AsyncGenerator
from pathlib import Path
from typing import Any

from proctor.env import Environment

env = Environment("container-probe")

HERE = Path(__file__).resolve().parent


def _outcome(exc: OSError) -> str:
    return errno.errorcode.get(exc.errno or 0, str(exc))


def _connect(host: str, port: int) -> str:
    try:
        socket.create_connection((host, port), timeout=2).close()
    except OSError as exc:
        return _outcome(exc)
    return "connected"


def _write(folder: Path) -> str:
    try:
        (folder / "written-from-a-container").write_text("x")
    except OSError as exc:
        return _outcome(exc)
    return "written"


def _capabilities() -> str:
    status = Path("/proc/self/status").read_text().splitlines()
    return next(ln.split()[1] for ln in status if ln.startswith("CapEff"))


@env.template
async def facts(host_port: int) -> AsyncGenerator[Any, Any]:
    """Network interfaces, outbound connections, writes, capabilities and env vars."""
    yield json.dumps(
        {
            "interfaces": sorted(os.listdir("/sys/class/net")),
            "outside": _connect("192.0.2.1", 80),  # TEST-NET-1: routed nowhere
            "host_loopback": _connect("127.0.0.1", host_port),
            "write_mount": _write(HERE),
            "capabilities": _capabilities(),
            "value": os.environ.get("PROCTOR_TEST_VALUE"),
        }
    )
    yield 1.0
