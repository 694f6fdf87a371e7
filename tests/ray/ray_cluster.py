"""A throwaway two-node Ray cluster for tests and benchmarks, in a private namespace.

`in_namespace(argv)` is the command that runs `argv` in fresh network and pid
namespaces, where `loopback_up()` brings up `lo`, the only interface. Outside one,
Ray probes a public address to find its own IP and binds the machine's interface;
inside one, every listener is on 127.0.0.1. The pid namespace is the backstop: when
the command's process tree ends, the kernel kills whatever Ray left. Inside it,
`LocalCluster` starts a head and a worker node (`ray start --block`, each leading its
own process group), with token auth, and stops them by process group and pid; never
with `ray stop`, which would kill every Ray process on the machine.
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
import secrets
import shutil
import signal
import socket
import struct
import subprocess
import sys
import tempfile
import time
from pathlib import Path

WORKER_LABEL = "node_b"  # the worker node's custom resource
HEAD_LABEL = "node_a"
GCS_PORT = 6379  # a fresh network namespace has every port free

# Quick node-death detection (default ~15 s) and token auth, for every process.
RAY_ENV = {
    "RAY_AUTH_MODE": "token",
    "RAY_health_check_initial_delay_ms": "0",
    "RAY_health_check_period_ms": "300",
    "RAY_health_check_timeout_ms": "300",
    "RAY_health_check_failure_threshold": "3",
    "RAY_USAGE_STATS_ENABLED": "0",
}


def in_namespace(argv: list[str]) -> list[str]:
    """`argv` run under `unshare` in new network, pid and mount namespaces.

    `argv` must call `loopback_up()` first: the new network namespace has only `lo`,
    and it is down. A shell stays pid 1, so orphans are not reparented to `argv`;
    `--kill-child` ends the namespace, and everything in it, when `unshare` is killed.
    """
    user = [] if os.geteuid() == 0 else ["--map-root-user"]
    return [
        "unshare", *user, "--net", "--pid", "--fork", "--kill-child", "--mount-proc",
        "sh", "-c", '"$@"; exit $?', "sh", *argv,
    ]  # fmt: skip


def loopback_up() -> None:
    """`ip link set lo up`, without needing iproute2: SIOCSIFFLAGS on `lo`."""
    get_flags, set_flags, up = 0x8913, 0x8914, 0x1  # SIOCGIFFLAGS, SIOCSIFFLAGS, IFF_UP
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as sock:
        request = struct.pack("16sH22x", b"lo", 0)
        flags = struct.unpack("16sH22x", fcntl.ioctl(sock, get_flags, request))[1]
        fcntl.ioctl(sock, set_flags, struct.pack("16sH22x", b"lo", flags | up))


class LocalCluster:
    """A head node and a worker node on 127.0.0.1, started in this namespace."""

    def __init__(self, cpus: int = 2, *, root: Path | None = None) -> None:
        # Short: Ray's Unix sockets live under it, and their paths are capped at 107 bytes.
        self.root = Path(tempfile.mkdtemp(prefix="proctor-ray-", dir=root))
        self.address = f"127.0.0.1:{GCS_PORT}"
        os.environ.update(RAY_ENV, RAY_AUTH_TOKEN=secrets.token_hex(32), RAY_ADDRESS=self.address)
        common = [
            "--node-ip-address=127.0.0.1",
            f"--num-cpus={cpus}",
            "--object-store-memory=80000000",
            "--disable-usage-stats",
        ]
        # The worker starts alongside the head; it retries until the GCS answers.
        self.head = self._node(
            "head",
            *common,
            "--head",
            f"--port={GCS_PORT}",
            "--include-dashboard=false",
            f"--temp-dir={self.root}",
            f"--resources={json.dumps({HEAD_LABEL: 1000})}",
        )
        self.worker = self._node(
            "worker", *common, f"--address={self.address}",
            f"--resources={json.dumps({WORKER_LABEL: 1000})}",
        )  # fmt: skip

    def _node(self, name: str, *args: str) -> subprocess.Popen[bytes]:
        ray = str(Path(sys.executable).with_name("ray"))
        with open(self.root / f"{name}.log", "wb") as log:
            return subprocess.Popen(
                [ray, "start", "--block", *args],
                stdout=log,
                stderr=subprocess.STDOUT,
                start_new_session=True,
            )

    def wait_nodes(self, timeout: float = 90.0) -> dict[str, str]:
        """Connect this process, wait for both nodes; return node id by label.

        Raises:
            TimeoutError: both nodes did not come up (the message quotes their logs).
        """
        import ray

        ray.init(address=self.address, log_to_driver=False)
        deadline = time.monotonic() + timeout
        while True:
            ids = {
                label: n["NodeID"]
                for n in ray.nodes()
                if n["Alive"]
                for label in (HEAD_LABEL, WORKER_LABEL)
                if label in n["Resources"]
            }
            if len(ids) == 2:
                return ids
            if time.monotonic() > deadline or self.head.poll() is not None:
                raise TimeoutError(f"the cluster did not come up:\n{self.logs()}")
            time.sleep(0.05)

    def logs(self) -> str:
        """The tail of each node's `ray start` output."""
        parts = []
        for name in ("head", "worker"):
            path = self.root / f"{name}.log"
            text = path.read_text(errors="replace") if path.exists() else ""
            parts.append(f"--- {name} ---\n" + "\n".join(text.splitlines()[-15:]))
        return "\n".join(parts)

    def kill_worker_node(self) -> list[int]:
        """SIGKILL the worker node: its process group, its raylet, the raylet's workers.

        Ray workers lead process groups of their own, so they are found as the
        raylet's children. Returns the pids killed.
        """
        group = [pid for pid in _pids() if _pgid(pid) == self.worker.pid]
        raylets = [pid for pid in group if "raylet/raylet" in _cmdline(pid)]
        victims = group + [pid for pid in _pids() if _ppid(pid) in raylets]
        for pid in victims:
            _kill(pid)
        self.worker.wait()
        return victims

    def close(self) -> None:
        """Disconnect, then kill both nodes' groups and workers; remove the temp dir."""
        import ray

        ray.shutdown()
        raylets = [p for p in _pids() if "raylet/raylet" in _cmdline(p)]
        workers = [p for p in _pids() if _ppid(p) in raylets]
        for node in (self.worker, self.head):
            if node.poll() is None:
                os.killpg(node.pid, signal.SIGKILL)
            node.wait()
        for pid in workers:
            _kill(pid)
        shutil.rmtree(self.root, ignore_errors=True)


def listeners() -> list[str]:
    """Every listening TCP socket of this network namespace, as `address:port`."""
    found = []
    for name, width in (("tcp", 8), ("tcp6", 32)):
        for line in Path(f"/proc/net/{name}").read_text().splitlines()[1:]:
            fields = line.split()
            if fields[3] == "0A":  # TCP_LISTEN
                address, port = fields[1].split(":")
                found.append(f"{_address(address, width)}:{int(port, 16)}")
    return found


def _address(hexed: str, width: int) -> str:
    raw = bytes.fromhex(hexed)
    # /proc prints each 32-bit word in host (little-endian) order.
    words = [raw[i : i + 4][::-1] for i in range(0, width // 2, 4)]
    packed = b"".join(words)
    if width == 8:
        return ".".join(str(b) for b in packed)
    if packed[:12] == b"\0" * 10 + b"\xff\xff":
        return "::ffff:" + ".".join(str(b) for b in packed[12:])
    return ":".join(packed[i : i + 2].hex() for i in range(0, 16, 2))


def _pids() -> list[int]:
    return [int(e) for e in os.listdir("/proc") if e.isdigit()]


def _stat(pid: int) -> list[str]:
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return []
    return stat[stat.rindex(")") + 2 :].split()


def _ppid(pid: int) -> int | None:
    fields = _stat(pid)
    return int(fields[1]) if fields else None


def _pgid(pid: int) -> int | None:
    fields = _stat(pid)
    return int(fields[2]) if fields else None


def _cmdline(pid: int) -> str:
    try:
        return Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode()
    except OSError:
        return ""


def _kill(pid: int) -> None:
    with contextlib.suppress(ProcessLookupError):
        os.kill(pid, signal.SIGKILL)
