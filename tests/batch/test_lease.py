"""A subprocess batch under a lease (`runtime.lease`): its servers outlive a killed
runner for the grace, a resuming runner continues their rollouts, and nothing outlives
the lease (nor the supervisor) by more than the grace.

Each rollout's first model turn asks for a slow shell command (`sleep`); the runner is
killed -9 while every rollout waits on it, with no model turn in flight.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import socket
import subprocess
import sys
import textwrap
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from proctor import BatchConfigError
from proctor.batch import BatchConfig, list_rollouts, read_events
from proctor.batch._lease import leased

HERE = Path(__file__).parent
PROCTOR = [sys.executable, "-m", "proctor.cli"]
ROWS = 2
KEY = "sk-lease-test-key-0123456789"
pytestmark = pytest.mark.timeout(300)

MODEL = textwrap.dedent(
    """
    import asyncio, json, os, re, signal, sys
    from proctor.testing import FakeModelServer, Reply

    log = os.open(sys.argv[1], os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)

    async def policy(request):
        messages = (request.json or {}).get("messages") or []
        if messages and messages[-1].get("role") == "tool":
            n = re.search(r"job (\\d+)", str(messages[0].get("content")))
            return f"done-{n[1] if n else '?'}"
        os.write(log, b"asked\\n")
        return Reply.tool("shell", command="sleep 8; echo ran")

    async def serve():
        stop = asyncio.Event()
        asyncio.get_running_loop().add_signal_handler(signal.SIGTERM, stop.set)
        async with FakeModelServer(policy, record=False, models=["gpt-4.1-mini"]) as fake:
            print(json.dumps({"url": fake.url}), flush=True)
            await stop.wait()

    asyncio.run(serve())
    """
)


def _env() -> dict[str, str]:
    return {**os.environ, "OPENAI_API_KEY": KEY, "PYTHONUNBUFFERED": "1"}


@pytest.fixture
def model(tmp_path: Path) -> Iterator[dict[str, Any]]:
    script = tmp_path / "model.py"
    script.write_text(MODEL)
    log = tmp_path / "asked.log"
    proc = subprocess.Popen([sys.executable, str(script), str(log)], stdout=subprocess.PIPE,
                            text=True, env=_env())  # fmt: skip
    assert proc.stdout is not None
    line = proc.stdout.readline()
    try:
        yield {"url": json.loads(line)["url"], "log": log}
    finally:
        proc.terminate()
        proc.wait(10)
        proc.stdout.close()


def _config(tmp_path: Path, model: dict[str, Any], lease: float, kind: str) -> Path:
    rows = [
        {"env": "crashy", "id": "job", "args": {"n": i}, "slug": f"job-{i}"} for i in range(ROWS)
    ]
    (tmp_path / "tasks.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    config = {
        "name": "lease",
        "taskset": {"source": "tasks.jsonl", "env_source": str(HERE / "crash_env.py")},
        "agents": [
            {
                "kind": "tool",
                "name": "fake",
                "model": f"openai/gpt-4.1-mini@{model['url']}",
                "max_steps": 4,
            }
        ],
        "runtime": {"kind": kind, "lease": lease},
        "max_concurrent": ROWS,
        "expected_rollouts": ROWS,
        "timeouts": {"rollout": 120},
    }
    path = tmp_path / "batch.json"
    path.write_text(json.dumps(config))
    return path


def _labelled(batch_id: str) -> list[int]:
    """Every live process carrying the batch's label (the supervisor and its servers)."""
    found = []
    for pid in os.listdir("/proc"):
        if pid.isdigit():
            try:
                environ = Path(f"/proc/{pid}/environ").read_bytes()
                state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
            except OSError:
                continue
            if f"PROCTOR_BATCH_ID={batch_id}".encode() in environ.split(b"\0") and state != "Z":
                found.append(int(pid))
    return found


def _supervisor(out: Path) -> int:
    for pid in os.listdir("/proc"):
        if pid.isdigit():
            try:
                argv = Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")
            except OSError:
                continue
            if b"proctor.batch._supervisor" in argv and str(out).encode() in argv:
                return int(pid)
    raise AssertionError("no supervisor")


def _until(what: str, check: Any, deadline: float = 60.0) -> Any:
    end = time.monotonic() + deadline
    while time.monotonic() < end:
        value = check()
        if value:
            return value
        time.sleep(0.1)
    raise AssertionError(f"{what} within {deadline:g}s")


def _killed_mid_agent(
    tmp_path: Path, model: dict[str, Any], lease: float, kind: str = "subprocess"
) -> tuple[Path, str]:
    """Start the batch, kill -9 its runner while every rollout runs its slow command."""
    config = _config(tmp_path, model, lease, kind)
    out = tmp_path / "out"
    argv = [*PROCTOR, "batch", str(config), "--execute", "--output-dir", str(out)]
    runner = subprocess.Popen([*argv, "--skip-model-check", "--quiet"], env=_env(),
                              stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)  # fmt: skip
    log: Path = model["log"]
    _until("every rollout asked for its command",
           lambda: log.exists() and log.read_text().count("asked") >= ROWS)  # fmt: skip
    time.sleep(1.0)  # the turn's answer reached the agent, its checkpoint saved
    runner.kill()
    runner.wait()
    batch_id = json.loads((out / "batch.json").read_text())["batch_id"]
    return out, batch_id


@pytest.mark.parametrize("kind", ["subprocess", "sandbox"])
def test_resume_within_the_grace_continues_every_rollout(
    tmp_path: Path, model: dict[str, Any], kind: str
) -> None:
    out, batch_id = _killed_mid_agent(tmp_path, model, lease=60, kind=kind)
    assert _labelled(batch_id)  # the servers outlive the runner, under the lease
    resume = subprocess.run([*PROCTOR, "batch", "--resume", str(out), "--quiet"], env=_env(),
                            capture_output=True, text=True, timeout=180)  # fmt: skip
    assert resume.returncode == 0, resume.stderr
    rows = list_rollouts(out, limit=None)
    assert [(r["status"], r["reward"]) for r in rows] == [("completed", 1.0)] * ROWS
    continued = [ev for ev in read_events(out) if ev.get("type") == "continued"]
    assert len(continued) == ROWS
    assert model["log"].read_text().count("asked") == ROWS  # no first turn asked twice
    _until("the batch's processes gone", lambda: not _labelled(batch_id), 30)


def test_nothing_outlives_a_lapsed_lease_nor_the_supervisor(
    tmp_path: Path, model: dict[str, Any]
) -> None:
    out, batch_id = _killed_mid_agent(tmp_path, model, lease=4)
    assert _labelled(batch_id)
    assert (out / "supervisor.sock").stat().st_mode & 0o777 == 0o600  # its uid's alone
    _until("the lease lapsed and everything stopped", lambda: not _labelled(batch_id), 60)
    assert not (out / "supervisor.sock").exists()


def test_the_servers_die_with_their_supervisor(tmp_path: Path, model: dict[str, Any]) -> None:
    out, batch_id = _killed_mid_agent(tmp_path, model, lease=60)
    supervisor = _supervisor(out)
    servers = set(_labelled(batch_id)) - {supervisor}
    assert servers  # its servers, alive
    for junk in (b"not json\n", b"[1, 2]\n", b'{"no": "op"}\n', b"7" * 100_000 + b"\n"):
        _send_raw(out / "supervisor.sock", junk)  # a broken peer is dropped, nothing else
    assert _supervisor(out) == supervisor and servers <= set(_labelled(batch_id))
    assert "Traceback" not in (out / "environment.log").read_text(errors="replace")
    os.kill(supervisor, signal.SIGKILL)
    _until("the servers died with the supervisor", lambda: not _labelled(batch_id), 30)


def _send_raw(path: Path, data: bytes) -> None:
    """Send `data` on the Unix socket at `path` (through its folder's fd: a tmp path may
    be longer than a socket address allows) and wait for the peer to close."""
    folder = os.open(path.parent, os.O_RDONLY)
    try:
        with socket.socket(socket.AF_UNIX) as sock:
            sock.settimeout(10)
            sock.connect(f"/proc/self/fd/{folder}/{path.name}")
            with contextlib.suppress(OSError):
                sock.sendall(data)
                sock.shutdown(socket.SHUT_WR)
                while sock.recv(65536):
                    pass
    finally:
        os.close(folder)


def test_a_harness_placed_in_the_substrate_is_refused_a_lease(tmp_path: Path) -> None:
    agent = {"kind": "command", "argv": ["h"], "model": "openai/m", "placement": "substrate"}
    config = BatchConfig.model_validate(
        {
            "taskset": {"source": "tasks.jsonl"},
            "agents": [agent],
            "runtime": {"kind": "sandbox", "lease": 5},
            "max_concurrent": 1,
            "expected_rollouts": 1,
        }
    )
    with pytest.raises(BatchConfigError, match=r"agents\[0\]\.placement: a harness placed"):
        leased(config, "b", str(tmp_path), str(tmp_path / "log"))
