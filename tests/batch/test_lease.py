"""Subprocess and sandbox batches run under a lease by default (`runtime.lease`, 30 s):
their servers outlive a killed runner for the grace, a resuming runner continues every
rollout that was in flight, and nothing outlives the lease (nor the supervisor) by more
than the grace.

Each rollout's first model turn asks for a shell command that blocks until the test
opens a gate (a file in a folder every server sees) and the runner is killed -9 once
every rollout's checkpoint holds that call, with no model turn in flight; the gate opens
before the resume, whose agents run the call again.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import textwrap
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from pydantic import ValidationError

from _support.supervisor import supervisor_pid
from proctor.batch import BatchConfig, list_rollouts, read_events, read_rollout
from proctor.batch._config_runtime import build_runtime
from proctor.batch._lease import lease_of, leased

HERE = Path(__file__).parent
PROCTOR = [sys.executable, "-m", "proctor.cli"]
ROWS = 4  # at concurrency 4: every rollout in flight at the kill
KEY = "sk-lease-test-key-0123456789"
pytestmark = pytest.mark.timeout(300)

MODEL = textwrap.dedent(
    """
    import asyncio, json, os, re, signal, sys
    from proctor.testing import FakeModelServer, Reply

    log = os.open(sys.argv[1], os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
    COMMANDS = {
        "block": "while [ ! -e {gate}/open ]; do sleep 0.2; done; echo ran",
        "sleep": "sleep 120",
    }

    async def policy(request):
        messages = (request.json or {}).get("messages") or []
        n = re.search(r"job (\\d+)", str(messages[0].get("content")))[1]
        if messages[-1].get("role") == "tool":
            return f"done-{n}"
        os.write(log, b"asked\\n")
        return Reply.tool("shell", command=COMMANDS[sys.argv[2]].format(gate=sys.argv[3]))

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


def _model(tmp_path: Path, command: str) -> Iterator[dict[str, Any]]:
    script = tmp_path / "model.py"
    script.write_text(MODEL)
    log = tmp_path / "asked.log"
    # not under /tmp, which a server has its own of; open to the servers' own uids
    gate = Path(tempfile.mkdtemp(prefix="proctor-lease-gate-", dir="/var/tmp"))
    gate.chmod(0o755)
    proc = subprocess.Popen([sys.executable, str(script), str(log), command, str(gate)],
                            stdout=subprocess.PIPE, text=True, env=_env())  # fmt: skip
    assert proc.stdout is not None
    line = proc.stdout.readline()
    try:
        yield {"url": json.loads(line)["url"], "log": log, "gate": gate}
    finally:
        proc.terminate()
        proc.wait(10)
        proc.stdout.close()
        shutil.rmtree(gate)


@pytest.fixture
def model(tmp_path: Path) -> Iterator[dict[str, Any]]:
    """A model whose command blocks until `gate/open` exists."""
    yield from _model(tmp_path, "block")


@pytest.fixture
def sleepy(tmp_path: Path) -> Iterator[dict[str, Any]]:
    """A model whose command blocks every time."""
    yield from _model(tmp_path, "sleep")


def _config(
    tmp_path: Path, model: dict[str, Any], runtime: dict[str, Any], rows: int = ROWS
) -> Path:
    lines = [{"env": "crashy", "id": "job", "args": {"n": i}} for i in range(rows)]
    (tmp_path / "tasks.jsonl").write_text("".join(json.dumps(r) + "\n" for r in lines))
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
        "runtime": runtime,
        "max_concurrent": rows,
        "expected_rollouts": rows,
        "timeouts": {"rollout": 240},
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


def _until(what: str, check: Any, deadline: float = 120.0) -> Any:
    end = time.monotonic() + deadline
    while time.monotonic() < end:
        value = check()
        if value:
            return value
        time.sleep(0.05)
    raise AssertionError(f"{what} within {deadline:g}s")


def _waiting_on_their_command(out: Path, rows: int) -> bool:
    """Every rollout's checkpoint holds its model's tool call, none a turn in flight."""
    found = 0
    for path in out.glob("rollouts/*/checkpoint.json"):
        with contextlib.suppress(OSError, ValueError):
            found += bool(json.loads(path.read_text()).get("pending"))
    return found == rows


def _killed_mid_agent(
    tmp_path: Path, model: dict[str, Any], runtime: dict[str, Any], rows: int = ROWS
) -> tuple[Path, str]:
    """Start the batch; kill -9 its runner once every rollout runs its command."""
    config = _config(tmp_path, model, runtime, rows)
    out = tmp_path / "out"
    argv = [*PROCTOR, "batch", str(config), "--execute", "--output-dir", str(out)]
    runner = subprocess.Popen([*argv, "--skip-model-check", "--quiet"], env=_env(),
                              stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)  # fmt: skip
    try:
        _until("every rollout waits on its command", lambda: _waiting_on_their_command(out, rows))
    finally:
        runner.kill()
        runner.wait()
    batch_id = json.loads((out / "batch.json").read_text())["batch_id"]
    return out, batch_id


def _resume(out: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run([*PROCTOR, "batch", "--resume", str(out), "--quiet"], env=_env(),
                          capture_output=True, text=True, timeout=240)  # fmt: skip


def test_a_rollout_killed_before_its_server_answered_runs_again_from_the_start(
    tmp_path: Path, model: dict[str, Any]
) -> None:
    """Killed while its server still starts (phase `provisioning`: nothing reached its
    task nor a model), a rollout runs afresh on resume instead of being interrupted."""
    gate = model["gate"]
    source = gate / "slow_env.py"  # a server's import (not the plan's) waits for the gate
    env = (HERE / "crash_env.py").read_text().replace("from __future__ import annotations", "")
    opened = str(gate / "open")
    wait = f"while 'PROCTOR_BATCH_ID' in os.environ and not os.path.exists({opened!r}):"
    source.write_text(f"import os, time\n{wait}\n    time.sleep(0.1)\n{env}")
    config = _config(tmp_path, model, {"kind": "subprocess"}, 2)
    doc = json.loads(config.read_text())
    doc["taskset"]["env_source"] = str(source)
    config.write_text(json.dumps(doc))
    out = tmp_path / "out"
    argv = [*PROCTOR, "batch", str(config), "--execute", "--output-dir", str(out)]
    runner = subprocess.Popen([*argv, "--skip-model-check", "--quiet"], env=_env(),
                              stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)  # fmt: skip
    try:
        _until("both rollouts provisioning", lambda: out.exists() and [
            (r["status"], r["phase"]) for r in list_rollouts(out, limit=None)
        ] == [("running", "provisioning")] * 2)  # fmt: skip
    finally:
        runner.kill()
        runner.wait()
    batch_id = json.loads((out / "batch.json").read_text())["batch_id"]
    (gate / "open").touch()
    resume = _resume(out)
    assert resume.returncode == 0, resume.stderr
    rows = list_rollouts(out, limit=None)
    assert [(r["status"], r["attempt"], r["reward"]) for r in rows] == [("completed", 1, 1.0)] * 2
    restarted = [ev for ev in read_events(out) if ev.get("type") == "restarted"]
    assert [ev["phase"] for ev in restarted] == ["provisioning"] * 2
    _until("the batch's processes gone", lambda: not _labelled(batch_id), 30)


@pytest.mark.parametrize("kind", ["subprocess", "sandbox"])
def test_a_resume_continues_every_rollout_in_flight_at_a_kill(
    tmp_path: Path, model: dict[str, Any], kind: str
) -> None:
    """The issue's check: kill -9 at concurrency 4, every rollout in flight; by default
    (no `lease` in the config) the resume continues them all, none `interrupted`."""
    runtime = {"kind": kind, "binds": [str(model["gate"])]} if kind == "sandbox" else {"kind": kind}
    out, batch_id = _killed_mid_agent(tmp_path, model, runtime)
    assert _labelled(batch_id)  # the servers outlive the runner, under the lease
    (model["gate"] / "open").touch()
    resume = _resume(out)
    assert resume.returncode == 0, resume.stderr
    rows = list_rollouts(out, limit=None)
    assert [(r["status"], r["reward"]) for r in rows] == [("completed", 1.0)] * ROWS
    continued = [ev for ev in read_events(out) if ev.get("type") == "continued"]
    assert len(continued) == ROWS
    assert model["log"].read_text().count("asked") == ROWS  # no first turn asked twice
    _until("the batch's processes gone", lambda: not _labelled(batch_id), 30)
    assert not (out / "supervisor.sock").exists()


def test_nothing_outlives_a_lapsed_lease_and_a_late_resume_says_why(
    tmp_path: Path, model: dict[str, Any]
) -> None:
    out, batch_id = _killed_mid_agent(tmp_path, model, {"kind": "subprocess", "lease": 1}, 2)
    assert (out / "supervisor.sock").stat().st_mode & 0o777 == 0o600  # its uid's alone
    _until("the lease lapsed and everything stopped", lambda: not _labelled(batch_id), 60)
    assert not (out / "supervisor.sock").exists()
    resume = _resume(out)  # its servers are gone: recorded at once, not after connecting
    assert resume.returncode == 1, resume.stderr
    for row in list_rollouts(out, limit=None):
        error = read_rollout(out, row["id"])["record"]["error"]
        assert row["status"] == "interrupted" and error["type"] == "SubstrateLost", row
        assert "its server is gone: it died, or the lease (runtime.lease = 1 s)" in error["message"]
    _until("the resume's supervisor gone", lambda: not _labelled(batch_id), 30)


def test_an_adopted_server_that_dies_fails_its_rollout_at_once_saying_why(
    tmp_path: Path, sleepy: dict[str, Any]
) -> None:
    out, batch_id = _killed_mid_agent(tmp_path, sleepy, {"kind": "subprocess"}, 1)
    supervisor = supervisor_pid(out)
    argv = [*PROCTOR, "batch", "--resume", str(out), "--quiet"]
    resume = subprocess.Popen(argv, env=_env(), stderr=subprocess.PIPE, text=True)
    try:
        _until("the rollout continued", lambda: "continued" in (out / "events.jsonl").read_text())
        for pid in set(_labelled(batch_id)) - {supervisor}:  # the server and its command
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
        _, err = resume.communicate(timeout=240)
    finally:
        resume.kill()
        resume.wait()
    assert resume.returncode == 1, err
    (row,) = list_rollouts(out, limit=None)
    error = read_rollout(out, row["id"])["record"]["error"]
    # the supervisor's word on how it died, not only a dropped connection (nor a deadline)
    assert (row["status"], error["phase"], error["type"]) == ("failed", "agent", "SubstrateLost")
    assert "killed by SIGKILL" in error["message"], error
    _until("the batch's processes gone", lambda: not _labelled(batch_id), 30)


def test_the_servers_die_with_their_supervisor(tmp_path: Path, sleepy: dict[str, Any]) -> None:
    out, batch_id = _killed_mid_agent(tmp_path, sleepy, {"kind": "subprocess"}, 2)
    supervisor = supervisor_pid(out)
    servers = set(_labelled(batch_id)) - {supervisor}
    assert servers  # its servers, alive
    for junk in (b"not json\n", b"[1, 2]\n", b'{"no": "op"}\n', b"7" * 100_000 + b"\n"):
        _send_raw(out / "supervisor.sock", junk)  # a broken peer is dropped, nothing else
    assert supervisor_pid(out) == supervisor and servers <= set(_labelled(batch_id))
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


# -- when a batch has no lease ------------------------------------------------------------


def _batch(runtime: dict[str, Any] | None = None, **fields: Any) -> BatchConfig:
    doc: dict[str, Any] = {
        "name": "old",
        "taskset": {"source": "tasks.jsonl", "env_source": "env.py"},
        "agents": [{"kind": "python", "agent": "a.py:f"}],
        "max_concurrent": 4,
        "expected_rollouts": 4,
        **fields,
    }
    if runtime is not None:
        doc["runtime"] = runtime
    return BatchConfig.model_validate(doc)


def _leased(config: BatchConfig, tmp_path: Path) -> Any:
    runtime = build_runtime(config, batch="b", log=os.devnull)
    return leased(config, runtime, "b", str(tmp_path), os.devnull)


def test_the_lease_is_the_default_and_lease_0_turns_it_off(tmp_path: Path) -> None:
    for runtime in ({"kind": "subprocess"}, {"kind": "sandbox"}, None):  # None: the default
        config = _batch(runtime)
        assert config.runtime.lease == 30  # type: ignore[union-attr]
        assert _leased(config, tmp_path).grace == 30
        assert _leased(_batch({"kind": config.runtime.kind, "lease": 0}), tmp_path) is None
    with pytest.raises(ValidationError, match=r"lease takes seconds \(0 turns it off\)"):
        _batch({"kind": "subprocess", "lease": False})
    with pytest.raises(ValidationError, match="greater than or equal to 0"):
        _batch({"kind": "sandbox", "lease": -1})


def test_a_batch_recorded_before_the_default_resumes_as_recorded(tmp_path: Path) -> None:
    """Its batch.json says `"lease": null`: the same digest as then (and as its config
    file, which now reads as the default), and no lease on resume, as when it ran."""
    before = {  # digests of these configs as batches recorded them before the lease
        "subprocess": "008e30b2b0a7211c7018e2cabdb2c44781979ae94d5ffbfaf2a3bbb328f17782",
        "sandbox": "b44944c2097a5d4bf22900694f19d8d77f9a539fec3dbec0106567dd7a43258b",
    }
    for kind, digest in before.items():
        file = _batch({"kind": kind})  # the config file, unchanged, read today
        recorded = file.model_dump(mode="json")
        recorded["runtime"]["lease"] = None  # as batch.json holds it
        old = BatchConfig.model_validate(recorded)
        assert file.digest() == old.digest() == digest
        assert _leased(old, tmp_path) is None
    assert _batch().digest() == before["sandbox"]  # no [runtime] at all


def test_no_lease_where_it_cannot_apply(tmp_path: Path) -> None:
    """A harness placed in the substrate (the supervisor hands out servers, not ways
    into their sandboxes) and a Ray executor (its shards build their own runtime)."""
    placed = {"kind": "command", "argv": ["h"], "model": "openai/m", "placement": "substrate"}
    config = _batch({"kind": "sandbox", "lease": 60}, agents=[placed])
    assert _leased(config, tmp_path) is None
    ray = _batch({"kind": "subprocess"}, executor={"kind": "ray", "address": "127.0.0.1:1"})
    assert _leased(ray, tmp_path) is None
    plain = _leased(_batch({"kind": "subprocess"}), tmp_path)
    assert repr(plain).startswith("LeasedRuntime(SubprocessRuntime(")
    # what the plan says of each (its substrate check's `lease`)
    assert lease_of(config) == (None, "a harness is placed in the substrate, which the "
                                "supervisor cannot enter")  # fmt: skip
    assert lease_of(ray) == (30.0, "the Ray executor's shards are held by its lease keeper")
    assert lease_of(_batch({"kind": "subprocess"})) == (
        30.0,
        "the lease supervisor holds the servers",
    )


def _supervisors(out: Path) -> list[int]:
    found = []
    for pid in os.listdir("/proc"):
        with contextlib.suppress(OSError):
            argv = Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")
            stat = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
            if b"proctor.batch._supervisor" in argv and str(out).encode() in argv and stat != "Z":
                found.append(int(pid))
    return found


@pytest.mark.parametrize("after", [0.0, 0.05, 0.2])
async def test_a_cancelled_start_leaves_no_supervisor(tmp_path: Path, after: float) -> None:
    """Cancelled wherever it is (spawning, waiting for READY, asking for the lease)."""
    runtime = _leased(_batch({"kind": "subprocess"}), tmp_path)
    start = asyncio.ensure_future(runtime.start())
    await asyncio.sleep(after)
    start.cancel()
    with contextlib.suppress(asyncio.CancelledError):
        await start
    if start.cancelled():
        assert runtime._proc is None
    else:  # it had the lease before the cancel came: let it go as a runner does
        await runtime.aclose()
    assert not _supervisors(tmp_path)
