"""The death of any service of a project fails its rollout at once with `SubstrateLost`
naming the service, while a service that exits 0 (a job done) does not."""

from __future__ import annotations

import asyncio
import subprocess
from pathlib import Path
from typing import Any

import pytest

from proctor import rollout
from proctor.agents import Run, agent_from_fn
from proctor.engine import Timeouts
from proctor.records import Task
from proctor.runtimes import ComposeRuntime

pytestmark = [pytest.mark.slow, pytest.mark.timeout(200)]

ENV = """
from proctor import Environment

env = Environment("waits")


@env.template
async def wait():
    answer = yield "wait"
    yield 1.0
"""

PATIENCE = 120.0  # what the agent would wait for: only a death ends it sooner


def _podman(*argv: str) -> str:
    done = subprocess.run(["podman", *argv], capture_output=True, text=True, timeout=60)
    return done.stdout.strip()


def _service(batch: str, service: str, *state: str) -> list[str]:
    filters = [f"--filter=label=proctor.batch={batch}", f"--filter=label=proctor.service={service}"]
    return _podman("ps", "-a", "-q", *filters, *state).split()


async def test_a_killed_database_fails_the_rollout_naming_it_and_a_finished_job_does_not(
    tmp_path: Path, image: str, options: dict[str, Any]
) -> None:
    (tmp_path / "env.py").write_text(ENV)
    (tmp_path / "compose.yaml").write_text(
        f"""
services:
  db:
    image: {image}
    command: python -c "import time; time.sleep(600)"
    stop_grace_period: 0s
  job:
    image: {image}
    command: python -c "import time; time.sleep(1)"
  main:
    image: {image}
    volumes: ["./:/t:ro"]
    depends_on: [db, job]
"""
    )
    runtime = ComposeRuntime(tmp_path / "compose.yaml", "/t/env.py", **options)

    @agent_from_fn
    async def killer(run: Run) -> None:
        """Waits for the job to end (code 0), then kills the database, then waits."""
        for _ in range(600):
            if await asyncio.to_thread(_service, runtime.batch, "job", "--filter=status=exited"):
                break
            await asyncio.sleep(0.1)
        (db,) = await asyncio.to_thread(_service, runtime.batch, "db")
        await asyncio.to_thread(_podman, "kill", db)
        await asyncio.sleep(PATIENCE)

    async with runtime:
        run = await rollout(
            Task(env="waits", id="wait"), killer, runtime=runtime,
            timeout=Timeouts(rollout=PATIENCE * 2),
        )  # fmt: skip
        assert run.status == "failed"
        assert run.error is not None
        assert (run.error.phase, run.error.type) == ("agent", "SubstrateLost")
        assert "service db killed by SIGKILL" in run.error.message, run.error.message
        assert _service(runtime.batch, "db") == []  # the project is gone


async def test_a_service_out_of_memory_fails_the_rollout_naming_it(
    tmp_path: Path, image: str, options: dict[str, Any], monkeypatch: pytest.MonkeyPatch
) -> None:
    (tmp_path / "env.py").write_text(ENV)
    (tmp_path / "compose.yaml").write_text(
        f"""
services:
  hog:
    image: {image}
    command: python -c "import time; time.sleep(2); food = [b'x' * (1 << 20) for _ in range(1024)]"
  main:
    image: {image}
    volumes: ["./:/t:ro"]
    depends_on: [hog]
"""
    )
    here = tmp_path / "cwd"
    here.mkdir()
    monkeypatch.chdir(here)
    runtime = ComposeRuntime(
        tmp_path / "compose.yaml", "/t/env.py", resources={"memory": "128m"}, **options
    )

    @agent_from_fn
    async def patient(run: Run) -> None:
        await asyncio.sleep(PATIENCE)

    async with runtime:
        run = await rollout(
            Task(env="waits", id="wait"), patient, runtime=runtime,
            timeout=Timeouts(rollout=PATIENCE * 2),
        )  # fmt: skip
    assert run.error is not None and run.error.type == "SubstrateLost", run.error
    assert run.error.phase == "agent"
    # The engine's State.OOMKilled names it where it is reported (cgroup v2, docker);
    # podman on cgroup v1 reports a plain SIGKILL.
    assert "service hog" in run.error.message
    assert "OOM-killed" in run.error.message or "killed by SIGKILL" in run.error.message
    assert list(here.iterdir()) == []  # conmon's `oom` file is never the driver's
