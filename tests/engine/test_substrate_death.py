"""A substrate that dies during the agent phase fails the rollout at once, naming the
phase and the cause, instead of leaving the agent to run into a deadline."""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import shutil
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from proctor import Task
from proctor.agents import Agent, Run, agent_from_fn
from proctor.batch import aexecute, list_rollouts, read_rollout
from proctor.channel import connect
from proctor.engine import Timeouts, rollout
from proctor.runtimes import (
    ContainerRuntime,
    LocalRuntime,
    Runtime,
    SandboxRuntime,
    SubprocessRuntime,
    UrlRuntime,
)
from proctor.runtimes._image import python_image
from proctor.testing import conformance_env

# The server kills itself a moment after the task started (a warm child is pid 1 of
# its namespace, where a signal it sends itself is ignored: it exits instead).
ENV_SOURCE = """
import os, signal, threading
from proctor import Environment

env = Environment("doomed-env")


def die():
    if os.getpid() == 1:
        os._exit(9)
    os.kill(os.getpid(), signal.SIGKILL)


@env.template
async def doomed():
    threading.Timer(0.3, die).start()
    answer = yield "wait"
    yield 1.0


@env.template
async def hog():
    def eat():
        global food
        food = [b"x" * (1 << 20) for _ in range(1024)]

    threading.Timer(0.3, eat).start()
    answer = yield "wait"
    yield 1.0
"""

TASK = Task(env="doomed-env", id="doomed")
PATIENCE = 60.0  # what the agent would wait for
RUNC = "/usr/sbin/runc"
BOUND = 15.0  # generous: the run must end well before the agent would


@agent_from_fn
async def patient(run: Run) -> None:
    """Does not touch the connection: only the substrate's death can stop it early."""
    await asyncio.sleep(PATIENCE)


@pytest.fixture
def source(tmp_path: Path) -> Path:
    path = tmp_path / "doomed_env.py"
    path.write_text(ENV_SOURCE)
    path.chmod(0o644)  # the sandbox's own uid reads it
    tmp_path.chmod(0o755)
    return path


async def _doomed_run(
    runtime: Runtime, task: Task = TASK, agent: Agent = patient
) -> tuple[Run, float]:
    began = time.monotonic()
    run = await rollout(task, agent, runtime=runtime, timeout=Timeouts(rollout=PATIENCE * 2))
    return run, time.monotonic() - began


def _assert_lost(run: Run, elapsed: float, cause: str) -> None:
    assert run.status == "failed"
    assert run.error is not None
    assert run.error.phase == "agent"
    assert run.error.type == "SubstrateLost"
    assert cause in run.error.message
    assert elapsed < BOUND


@pytest.mark.parametrize("warm", [0, 1], ids=["cold", "warm"])
async def test_subprocess_server_killed(source: Path, warm: int) -> None:
    async with SubprocessRuntime(source, warm=warm) as runtime:
        run, elapsed = await _doomed_run(runtime)
    _assert_lost(run, elapsed, "exited" if warm else "killed by SIGKILL")


@pytest.fixture
def served(source: Path) -> Iterator[int]:
    """`proctor serve` of the doomed source, as a user runs it; yields its port."""
    argv = [sys.executable, "-m", "proctor.serve", str(source), "--port", "0"]
    with subprocess.Popen(argv, stdout=subprocess.PIPE, text=True) as server:
        try:
            assert server.stdout is not None
            for line in server.stdout:
                if line.startswith("PROCTOR_SERVE_PORT="):
                    yield int(line.partition("=")[2])
                    break
            else:
                pytest.fail("the server exited before serving")
        finally:
            server.kill()


async def test_a_dropped_connection_fails_the_agent_phase_too(served: int) -> None:
    """A server the runtime cannot watch (a URL): its connection dropping is the sign."""
    run, elapsed = await _doomed_run(UrlRuntime(f"tcp://127.0.0.1:{served}"))
    _assert_lost(run, elapsed, "the connection to the environment dropped")


@agent_from_fn
async def stubborn(run: Run) -> None:
    """Swallows the first cancellation, then returns: the run fails all the same."""
    with contextlib.suppress(asyncio.CancelledError):
        await asyncio.sleep(PATIENCE)


async def test_an_agent_that_swallows_the_cancel_still_fails(source: Path) -> None:
    async with SubprocessRuntime(source) as runtime:
        run, elapsed = await _doomed_run(runtime, agent=stubborn)
    _assert_lost(run, elapsed, "killed by SIGKILL")


@pytest.mark.skipif(shutil.which("bwrap") is None, reason="bubblewrap is not installed")
@pytest.mark.parametrize("warm", [False, True], ids=["cold", "warm"])
async def test_sandbox_server_killed(source: Path, warm: bool) -> None:
    async with SandboxRuntime(source, warm=warm) as runtime:
        run, elapsed = await _doomed_run(runtime)
    _assert_lost(run, elapsed, "exited" if warm else "environment server exited with code 9")


def _podman_problem() -> str | None:
    if shutil.which("podman") is None:
        return "podman is not installed"
    info = subprocess.run(["podman", "info"], capture_output=True, timeout=60)
    return None if info.returncode == 0 else "podman does not answer `podman info`"


@pytest.fixture(scope="module")
def podman_image() -> str:
    problem = _podman_problem()
    if problem is not None:
        pytest.skip(problem)
    return python_image(engine="podman")


def _container(image: str, source: Path, **options: Any) -> ContainerRuntime:
    folder = source.parent
    if os.path.exists(RUNC):  # crun fails on these hosts' cgroups
        options["oci_runtime"] = RUNC
    return ContainerRuntime(
        image, str(source), engine="podman", mounts=[f"{folder}:{folder}:ro"], **options
    )


@pytest.mark.parametrize("network", ["none", "bridge"])
async def test_container_killed(podman_image: str, source: Path, network: str) -> None:
    runtime = _container(podman_image, source, network=network)

    @agent_from_fn
    async def kills_it(run: Run) -> None:
        ps = ["podman", "ps", "-q", f"--filter=label=proctor.batch={runtime.batch}"]
        found = await asyncio.to_thread(subprocess.run, ps, capture_output=True, text=True)
        ids = found.stdout.split()
        assert len(ids) == 1
        await asyncio.to_thread(subprocess.run, ["podman", "kill", ids[0]], check=True)
        await asyncio.sleep(PATIENCE)

    async with runtime:
        run, elapsed = await _doomed_run(runtime, Task(env="doomed-env", id="hog"), kills_it)
    # podman kill: the server may answer before the hog eats; either way it is SIGKILL
    _assert_lost(run, elapsed, "killed by SIGKILL")


async def test_container_oom_killed(
    podman_image: str, source: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    here = tmp_path / "cwd"
    here.mkdir()
    monkeypatch.chdir(here)
    runtime = _container(podman_image, source, resources={"memory": "64m"})
    async with runtime:
        run, elapsed = await _doomed_run(runtime, Task(env="doomed-env", id="hog"))
    # conmon writes an `oom` file into its working folder: never the driver's
    assert list(here.iterdir()) == []
    # The engine's State.OOMKilled names it where it is reported (cgroup v2, docker);
    # podman on cgroup v1 reports a plain SIGKILL.
    assert run.error is not None
    cause = "OOM-killed" if "OOM-killed" in run.error.message else "killed by SIGKILL"
    _assert_lost(run, elapsed, cause)


AGENTS = """
import asyncio


async def patient(run):
    await asyncio.sleep(60)
"""


async def test_a_batch_records_the_lost_substrate(source: Path) -> None:
    root = source.parent
    (root / "agents.py").write_text(AGENTS)
    rows = [{"env": "doomed-env", "id": "doomed", "slug": "doomed"}]
    (root / "tasks.json").write_text(json.dumps(rows))
    cfg = {
        "name": "doomed",
        "taskset": {"source": "tasks.json", "env_source": source.name},
        "agents": [{"kind": "python", "agent": "agents.py:patient"}],
        "runtime": {"kind": "subprocess"},
        "expected_rollouts": 1,
        "max_concurrent": 1,
    }
    (root / "batch.json").write_text(json.dumps(cfg))
    began = time.monotonic()
    result = await aexecute(root / "batch.json", root / "out")
    assert result.launched and time.monotonic() - began < BOUND
    [row] = list_rollouts(root / "out")
    rec = read_rollout(root / "out", row["id"])["record"]
    assert rec["status"] == "failed"
    assert rec["error"]["phase"] == "agent" and rec["error"]["type"] == "SubstrateLost"
    assert "killed by SIGKILL" in rec["error"]["message"]


async def test_closing_a_client_is_not_a_lost_connection() -> None:
    heard: list[Exception] = []
    runtime = LocalRuntime(conformance_env.env)
    async with runtime(conformance_env.echo(text="hi")) as endpoint:
        async with connect(endpoint.target, token=endpoint.token) as client:
            client.on_lost(heard.append)
        client.on_lost(heard.append)
    assert heard == []
