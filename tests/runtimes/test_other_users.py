"""No runtime's server is usable by another local user while a rollout is in flight.

A process running as uid nobody (65534, also the sandbox's host uid) tries `hello`,
`tasks.start` and `tunnel.open {capability: "shell"}` as the first frame on every
listening TCP port and Unix socket of the runtime's processes (found through their
/proc/PID/fd), and on the endpoint itself: every attempt must be refused, by an
`unauthorized` error frame or at connect.
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import subprocess
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest

from proctor import Task
from proctor.channel import connect
from proctor.runtimes import Endpoint, Runtime, SandboxRuntime, SubprocessRuntime

SOURCE = Path(__file__).with_name("sandbox_env.py")
NOBODY = ["setpriv", "--reuid=65534", "--regid=65534", "--clear-groups"]

pytestmark = pytest.mark.skipif(
    os.geteuid() != 0 or shutil.which("setpriv") is None, reason="needs root and setpriv"
)

# Runs as nobody under the system Python (stdlib only): targets on stdin, outcomes out.
PROBER = r"""
import json, socket, sys

FRAMES = [
    {"jsonrpc": "2.0", "id": 1, "method": "hello", "params": {}},
    {"jsonrpc": "2.0", "id": 1, "method": "tasks.start", "params": {"id": "probe"}},
    {"jsonrpc": "2.0", "id": 1, "method": "tunnel.open", "params": {"capability": "shell"}},
]

def attempt(target, frame):
    kind, _, where = target.partition("://")
    try:
        if kind == "unix":
            sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
            sock.settimeout(5)
            sock.connect(where)
        else:
            host, _, port = where.rpartition(":")
            sock = socket.create_connection((host.strip("[]"), int(port)), timeout=5)
    except OSError as exc:
        return f"refused at connect: {exc.strerror or exc}"
    with sock:
        try:
            sock.sendall(json.dumps(frame).encode() + b"\n")
            data = b""
            while b"\n" not in data:
                chunk = sock.recv(65536)
                if not chunk:
                    break
                data += chunk
        except OSError as exc:
            return f"refused: {exc.strerror or exc}"
    if not data:
        return "closed"
    try:
        reply = json.loads(data.split(b"\n")[0])
        if "unauthorized" in reply["error"]["message"]:
            return "unauthorized"
    except (ValueError, KeyError, TypeError):
        pass
    return "ANSWERED " + data[:300].decode(errors="replace")

targets = json.load(sys.stdin)
print(json.dumps({t: {f["method"]: attempt(t, f) for f in FRAMES} for t in targets}))
"""


def _descendants(root: int) -> list[int]:
    children: dict[int, list[int]] = {}
    for entry in os.scandir("/proc"):
        with contextlib.suppress(OSError, ValueError):
            stat = Path(entry.path, "stat").read_text()
            children.setdefault(int(stat[stat.rindex(")") + 2 :].split()[1]), []).append(
                int(entry.name)
            )
    out, todo = [], [root]
    while todo:
        for child in children.get(todo.pop(), []):
            out.append(child)
            todo.append(child)
    return out


def _sockets(pid: int) -> set[str]:
    found = set()
    with contextlib.suppress(OSError):
        for fd in os.listdir(f"/proc/{pid}/fd"):
            with contextlib.suppress(OSError):
                link = os.readlink(f"/proc/{pid}/fd/{fd}")
                if link.startswith("socket:["):
                    found.add(link[8:-1])
    return found


def listening(pids: list[int]) -> list[str]:
    """tcp:// and unix:// addresses the processes listen on, as the host reaches them.

    A Unix socket inside a sandbox is also tried through /proc/PID/root, which any
    process of the sandbox's host uid may open.
    """
    here = os.readlink("/proc/self/ns/net")
    targets: set[str] = set()
    for pid in pids:
        inodes = _sockets(pid)
        with contextlib.suppress(OSError):
            same_net = os.readlink(f"/proc/{pid}/ns/net") == here
            for name in ("tcp", "tcp6"):
                for line in Path(f"/proc/{pid}/net/{name}").read_text().splitlines()[1:]:
                    fields = line.split()
                    if fields[3] == "0A" and fields[9] in inodes and same_net:
                        targets.add(f"tcp://127.0.0.1:{int(fields[1].split(':')[1], 16)}")
            for line in Path(f"/proc/{pid}/net/unix").read_text().splitlines()[1:]:
                fields = line.split()
                listens = int(fields[3], 16) & 0x10000
                if listens and fields[6] in inodes and len(fields) > 7 and fields[7][0] == "/":
                    for path in (fields[7], f"/proc/{pid}/root{fields[7]}"):
                        targets.add(f"unix://{path}")
    return sorted(targets)


def probe_as_nobody(targets: list[str]) -> dict[str, dict[str, str]]:
    out = subprocess.run(
        [*NOBODY, "/usr/bin/python3", "-c", PROBER],
        input=json.dumps(targets), capture_output=True, text=True, timeout=120, check=True,
    )  # fmt: skip
    result: dict[str, dict[str, str]] = json.loads(out.stdout)
    return result


@contextlib.asynccontextmanager
async def in_flight(provider: Runtime) -> AsyncIterator[tuple[Endpoint, list[str]]]:
    """A started rollout (shell declared) on `provider`; its endpoint and its addresses."""
    task = Task(env="sandbox-probe", id="linger", args={"tag": "x"})
    async with provider(task) as ep, connect(ep.target, token=ep.token) as client:
        assert client.manifest is not None
        assert [b.name for b in client.manifest.bindings] == ["shell"]
        await client.start_task("linger", {"tag": "x"})
        urls = [ep.url, *(b.url for b in client.manifest.bindings)]
        reachable = [u for u in urls if u.startswith(("tcp://", "unix:///"))]
        yield ep, sorted({*reachable, *listening(_descendants(os.getpid()))})


RUNTIMES: list[Any] = [
    pytest.param(lambda: SubprocessRuntime(SOURCE), id="subprocess-cold"),
    pytest.param(lambda: SubprocessRuntime(SOURCE, warm=1), id="subprocess-warm"),
    pytest.param(lambda: SandboxRuntime(SOURCE, network="host"), id="sandbox-host-cold"),
    pytest.param(lambda: SandboxRuntime(SOURCE, network="host", warm=True), id="sandbox-host-warm"),
    pytest.param(lambda: SandboxRuntime(SOURCE), id="sandbox-none-cold"),
    pytest.param(lambda: SandboxRuntime(SOURCE, warm=True), id="sandbox-none-warm"),
]


@pytest.mark.parametrize("make", RUNTIMES)
async def test_another_user_gets_nothing_from_a_runtimes_servers(make: Any) -> None:
    if isinstance(make(), SandboxRuntime) and shutil.which("bwrap") is None:
        pytest.skip("bubblewrap is not installed")
    runtime = make()
    async with runtime, in_flight(runtime) as (ep, targets):
        assert ep.token, "a runtime's server must require a token"
        outcomes = probe_as_nobody(targets)
    assert ep.url in outcomes
    if ep.url.startswith("tcp://"):  # reached, and refused (a Unix socket's folder is closed)
        assert outcomes[ep.url]["hello"] == "unauthorized", outcomes[ep.url]
    answered = {
        f"{target} {method}": outcome
        for target, tried in outcomes.items()
        for method, outcome in tried.items()
        if not outcome.startswith(("refused", "closed", "unauthorized"))
    }
    assert not answered, answered
