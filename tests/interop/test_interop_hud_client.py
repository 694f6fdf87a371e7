"""HUD's own client (hud==0.6.21) drives a proctor server.

`python -m proctor.serve proctor_env.py` runs under this interpreter; one run of
`peer_scripts/drive_proctor.py` under the peers interpreter does every check with
`hud.connect`, `rollout`, `Taskset.run` and the `hud task` CLI, and prints the results
as one JSON object; the tests below assert on its parts.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import selectors
import signal
import subprocess
import sys
import time
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import pytest

from _support.waiting import wait_until

pytestmark = pytest.mark.hud

HERE = Path(__file__).resolve().parent
PROCTOR_ENV = HERE / "proctor_env.py"
DRIVER = HERE / "peer_scripts" / "drive_proctor.py"
RESULT_PREFIX = b"INTEROP_RESULT="
PORT_LINE = re.compile(rb"PROCTOR_SERVE_PORT=(\d+)\n")


def stop_group(proc: subprocess.Popen[bytes], grace: float = 5.0) -> None:
    """SIGTERM the child's process group, SIGKILL it after `grace`; always reap."""
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(proc.pid, signal.SIGTERM)
    with contextlib.suppress(subprocess.TimeoutExpired):
        proc.wait(grace)
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(proc.pid, signal.SIGKILL)
    proc.wait(grace)


@contextlib.contextmanager
def spawned(argv: Sequence[str], **kwargs: Any) -> Iterator[subprocess.Popen[bytes]]:
    """A child leading its own process group, which is stopped on exit."""
    proc = subprocess.Popen(argv, start_new_session=True, **kwargs)
    try:
        yield proc
    finally:
        stop_group(proc)
        for stream in (proc.stdin, proc.stdout, proc.stderr):
            if stream is not None:
                stream.close()


def first_line(proc: subprocess.Popen[bytes], timeout: float) -> bytes:
    """The child's first stdout line (with its newline), waiting at most `timeout`."""
    assert proc.stdout is not None
    fd = proc.stdout.fileno()
    buf = b""
    deadline = time.monotonic() + timeout
    with selectors.DefaultSelector() as sel:
        sel.register(fd, selectors.EVENT_READ)
        while b"\n" not in buf:
            left = deadline - time.monotonic()
            if left <= 0 or not sel.select(left):
                break
            chunk = os.read(fd, 4096)
            if not chunk:
                break
            buf += chunk
    line, newline, _ = buf.partition(b"\n")
    return line + newline


def socket_count(pid: int) -> int | None:
    """How many sockets `pid` holds open (Linux /proc), or None when unknown."""
    try:
        fds = list(Path(f"/proc/{pid}/fd").iterdir())
    except OSError:
        return None
    count = 0
    for fd in fds:
        with contextlib.suppress(OSError):
            count += os.readlink(fd).startswith("socket:")
    return count


@dataclass
class ProctorServer:
    url: str
    port_line: bytes
    proc: subprocess.Popen[bytes]
    stderr: Path


@dataclass
class Outcome:
    results: dict[str, Any]
    sockets_before: int | None
    sockets_after: int | None
    server_stderr: str


@pytest.fixture(scope="module")
def proctor_server(
    peers_python: str, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[ProctorServer]:
    """`python -m proctor.serve proctor_env.py --legacy-resume` on an ephemeral port (skips
    without peers)."""
    stderr = tmp_path_factory.mktemp("proctor-serve") / "stderr.log"
    # HUD's clients resume parked sessions without a resume_token and adopt by a bare grade.
    argv = [sys.executable, "-m", "proctor.serve", str(PROCTOR_ENV), "--port", "0",
            "--legacy-resume"]  # fmt: skip
    with (
        stderr.open("wb") as err,
        spawned(argv, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=err) as proc,
    ):
        line = first_line(proc, 30)
        match = PORT_LINE.fullmatch(line)
        if match is None:
            pytest.fail(f"proctor.serve announced {line!r}; stderr:\n{stderr.read_text()}")
        yield ProctorServer(f"tcp://127.0.0.1:{int(match[1])}", line, proc, stderr)


@pytest.fixture(scope="module")
def outcome(
    proctor_server: ProctorServer,
    peers_python: str,
    hud_environ: dict[str, str],
    hud_dirs: dict[str, Path],
) -> Outcome:
    """Run the HUD driver once against the module's server and parse what it found."""
    pid = proctor_server.proc.pid
    before = socket_count(pid)
    argv = [peers_python, str(DRIVER), proctor_server.url]
    with spawned(
        argv,
        env=hud_environ,
        cwd=hud_dirs["cwd"],
        stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
    ) as proc:
        try:
            out, err = proc.communicate(timeout=120)
        except subprocess.TimeoutExpired:
            stop_group(proc)
            out, err = proc.communicate()
    lines = [line for line in out.splitlines() if line.startswith(RESULT_PREFIX)]
    if proc.returncode != 0 or len(lines) != 1:
        pytest.fail(
            f"driver exited {proc.returncode}\n--- stdout ---\n{out.decode(errors='replace')}"
            f"\n--- stderr ---\n{err.decode(errors='replace')[-8000:]}"
        )
    # the server sees the driver's connections close (the test compares the counts)
    wait_until(lambda: socket_count(pid) == before, within=5)
    return Outcome(
        json.loads(lines[0][len(RESULT_PREFIX) :]),
        before,
        socket_count(pid),
        proctor_server.stderr.read_text(errors="replace"),
    )


@pytest.fixture
def results(outcome: Outcome) -> dict[str, Any]:
    return outcome.results


def section(results: dict[str, Any], name: str) -> dict[str, Any]:
    """One section of the driver's results; fails with the exception it recorded."""
    part = results[name]
    assert "exception" not in part, f"{name}: {part['exception']}"
    return part


def refusal(part: dict[str, Any]) -> tuple[int, str]:
    assert "code" in part, f"expected an error reply, got {part}"
    return part["code"], part["message"]


def test_serve_announces_its_port(proctor_server: ProctorServer) -> None:
    assert PORT_LINE.fullmatch(proctor_server.port_line)
    assert proctor_server.proc.poll() is None


def test_driver_is_hud(results: dict[str, Any]) -> None:
    assert results["hud_version"] == "0.6.21"


def test_hello_manifest(results: dict[str, Any]) -> None:
    session = section(results, "session")
    manifest = session["manifest"]
    assert re.fullmatch(r"sess-[0-9a-f]+", manifest["session_id"])
    assert (manifest["name"], manifest["version"]) == ("proctor-interop", "0.1.0-test")
    [echo] = manifest["bindings"]
    assert (echo["name"], echo["protocol"], echo["params"]) == ("echo", "echo/1", {"x": 1})
    assert urlsplit(echo["url"]).hostname == "127.0.0.1"
    # HUD's heartbeat (hello with its own session id) keeps the session and its task
    assert session["heartbeat_session_id"] == manifest["session_id"]


def test_list_tasks(results: dict[str, Any]) -> None:
    tasks = {t["id"]: t for t in section(results, "session")["tasks"]}
    assert list(tasks) == ["add", "episode", "rich", "slow", "boom"]
    assert tasks["add"]["description"] == "Add two numbers"
    props = tasks["add"]["args"]["properties"]
    assert props["a"] == {"type": "integer", "default": 1}
    assert props["b"] == {"type": "integer", "default": 2}


def test_start_grade_cancel(results: dict[str, Any]) -> None:
    session = section(results, "session")
    assert session["start"] == {"prompt": "What is 2 + 3?"}
    assert session["grade"] == {"score": 1.0}
    assert refusal(session["grade_after_cancel"])[0] == -32600
    assert session["second_grade"] == {"score": 1.0}


def test_error_codes(results: dict[str, Any]) -> None:
    session = section(results, "session")
    assert refusal(session["grade_again"])[0] == -32600
    assert refusal(session["unknown_task"])[0] == -32602
    assert "nope" in refusal(session["unknown_task"])[1]
    assert refusal(session["bad_args"])[0] == -32000
    code, message = refusal(session["boom"])
    assert code == -32000 and "kaboom at start" in message
    assert refusal(session["unknown_method"]) == (-32601, "method not found: no.such.method")


def test_rich_grade_parses_in_hud(results: dict[str, Any]) -> None:
    rich = section(results, "session")["rich"]
    assert rich["raw"]["score"] == rich["reward"] == 0.75
    assert (rich["content"], rich["info"]) == ("got 'x'", {"k": 1})
    assert (rich["is_error"], rich["done"]) == (False, True)
    subscores = rich["evaluation"]["subscores"]
    assert [(s["name"], s["value"], s["weight"]) for s in subscores] == [
        ("form", 1.0, 0.5),
        ("substance", 0.5, 0.5),
    ]


def test_tunnel_through_hud_forwarder(results: dict[str, Any]) -> None:
    session = section(results, "session")
    assert session["tunnel"]["equal"] is True
    assert session["tunnel"]["received"] == session["tunnel"]["sent"] > 256 * 1024
    routed = urlsplit(session["routed_url"])
    native = urlsplit(session["manifest"]["bindings"][0]["url"])
    assert routed.hostname == "127.0.0.1" and routed.port != native.port


def test_heartbeat_task_keeps_the_session(results: dict[str, Any]) -> None:
    heartbeat = section(results, "heartbeat")
    assert heartbeat["grade"] == {"score": 1.0}
    assert heartbeat["warnings"] == []


def test_parked_task_is_adopted_or_resumed(results: dict[str, Any]) -> None:
    parking = section(results, "parking")
    assert parking["adopted"] == {"score": 1.0}
    assert parking["resumed_session_id"] is True
    assert parking["resumed"] == {"score": 1.0}
    assert refusal(parking["ambiguous"])[0] == -32600
    assert parking["ambiguous_names_both"] is True
    assert parking["resumed_2"] == parking["resumed_4"] == {"score": 1.0}
    assert refusal(parking["nothing_parked"])[0] == -32600


def test_rollout_with_hud_agent(results: dict[str, Any]) -> None:
    run = section(results, "rollouts")["rollout"]
    assert run["errors"] == []
    assert (run["reward"], run["status"], run["is_error"]) == (1.0, "completed", False)
    assert (run["prompt"], run["answer"]) == ("What is 20 + 22?", "42")


def test_taskset_run_with_hud_agent(results: dict[str, Any]) -> None:
    taskset = section(results, "rollouts")["taskset"]
    assert (taskset["count"], taskset["errors"]) == (8, 0)
    runs = taskset["runs"]
    assert all(run["errors"] == [] and run["status"] == "completed" for run in runs.values())
    rewards = {slug.split("-")[0]: run["reward"] for slug, run in runs.items()}
    assert rewards == {"add": 1.0, "episode": 1.0, "rich": 0.75}
    assert [run["reward"] for slug, run in runs.items() if slug.startswith("add")] == [1.0] * 6
    [episode] = [run for slug, run in runs.items() if slug.startswith("episode")]
    assert episode["raw"] == {"score": 1.0, "seen": "slot-11"}


def test_rollout_timeout_cancels_the_task(results: dict[str, Any]) -> None:
    rollouts = section(results, "rollouts")
    timed = rollouts["timeout"]
    assert (timed["status"], timed["stop_reason"]) == ("error", "timeout")
    # HUD abandoned the task (tasks.cancel mid-grade); the server dropped it, not parked it
    assert refusal(rollouts["after_timeout"])[0] == -32600


def test_cli_split_start_and_grade(results: dict[str, Any]) -> None:
    cli = results["cli"]
    assert cli["start"]["result"] == {"prompt": "What is 5 + 6?"}
    assert cli["grade"]["result"] == {"score": 1.0}
    assert cli["grade"]["stdout"] == "1.0\n"


def test_cli_grade_with_nothing_parked_starts_the_task(results: dict[str, Any]) -> None:
    assert results["cli"]["grade_fresh"].get("result") == {"score": 1.0}


@pytest.mark.skipif(not Path("/proc/self/fd").is_dir(), reason="needs Linux /proc")
def test_server_closes_finished_tunnels(outcome: Outcome) -> None:
    # every control connection and tunnel stream of the driver is gone
    assert outcome.sockets_after == outcome.sockets_before


def test_server_logged_no_traceback(outcome: Outcome) -> None:
    assert "Traceback" not in outcome.server_stderr, outcome.server_stderr


def test_hud_stayed_offline(outcome: Outcome, hud_dirs: dict[str, Path]) -> None:
    # no CLI install id or settings were written to HOME, and spans stayed local
    assert list(hud_dirs["home"].iterdir()) == []
    assert any(hud_dirs["spans"].glob("*.jsonl"))
