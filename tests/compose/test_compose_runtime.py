"""`ComposeRuntime`: the example through `rollout()`, labels, teardown, and a bring-up
that fails half-way leaving nothing behind."""

from __future__ import annotations

import asyncio
import json
import os
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from proctor import RuntimeLaunchError, rollout
from proctor.records import Task
from proctor.runtimes import ComposeRuntime
from proctor.testing import RUNTIME_CHECKS, check_runtime, conformance_env

EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "compose"
pytestmark = [pytest.mark.slow, pytest.mark.timeout(200)]


_REACH = """
import socket
try:
    socket.create_connection(("%s", 8080), timeout=3).close()
    print("reached")
except OSError:
    print("unreachable")
"""


def _exec(container: str, code: str) -> str:
    argv = ["podman", "exec", container, "python", "-c", code]
    return subprocess.run(argv, capture_output=True, text=True, timeout=30).stdout.strip()


def _inspect(kind: str, name: str) -> dict[str, Any]:
    argv = ["podman", kind, "inspect", name]
    out = subprocess.run(argv, capture_output=True, text=True, check=True).stdout
    return json.loads(out)[0]


def _labelled(kind: str, batch: str) -> list[str]:
    argv = ["podman", *kind.split(), "-q", f"--filter=label=proctor.batch={batch}"]
    return subprocess.run(argv, capture_output=True, text=True, check=True).stdout.split()


def _exists(path: str) -> bool:
    return os.path.exists(path)


@pytest.fixture
def example(monkeypatch: pytest.MonkeyPatch) -> Any:
    monkeypatch.syspath_prepend(str(EXAMPLE))
    import tasks

    yield tasks
    for name in ("tasks", "env"):
        sys.modules.pop(name, None)


async def test_a_rollout_runs_in_a_project_and_leaves_nothing(
    image: str, options: dict[str, Any], example: Any
) -> None:
    runtime = ComposeRuntime(
        EXAMPLE / "compose.yaml", "/app/env.py", variables={"PROCTOR_IMAGE": image}, **options
    )
    async with runtime:
        row = next(iter(example.tasks))
        async with runtime(row):  # up: two containers and a network, all labelled
            containers = _labelled("ps", runtime.batch)
            assert len(containers) == 2
            (network,) = _labelled("network ls", runtime.batch)
            for container in containers:  # by name on the network, and no route out
                assert _exec(container, _REACH % "db") == "reached"
                assert _exec(container, _REACH % "10.0.2.2") == "unreachable"
                assert _exec(container, _REACH % "1.1.1.1") == "unreachable"
            info = _inspect("network", network)
            assert info["internal"] is True
            rollout_id = info["labels"]["proctor.rollout"]
            for container in containers:
                assert _inspect("container", container)["Config"]["Labels"]["proctor.rollout"] == (
                    rollout_id
                )
        assert _labelled("ps -a", runtime.batch) == []
        run = await rollout(row, example.clerk, runtime=runtime)
        assert (run.status, run.grade and run.grade.reward) == ("completed", 1.0), run.error
    assert _labelled("ps -a", runtime.batch) == [] and _labelled("network ls", runtime.batch) == []


async def test_release_removes_one_adopted_project_whole_and_leaves_the_others(
    image: str, options: dict[str, Any], example: Any
) -> None:
    runtime = ComposeRuntime(
        EXAMPLE / "compose.yaml", "/app/env.py", variables={"PROCTOR_IMAGE": image}, **options
    )
    row = next(iter(example.tasks))
    async with runtime, runtime(row) as kept, runtime(row) as adopted:
        folder = os.path.dirname(adopted.url.removeprefix("unix://"))
        project = os.path.basename(folder).removeprefix(f"proctor-{runtime.batch}-")
        assert len(_labelled("ps", runtime.batch)) == 4
        with pytest.raises(ValueError, match="not served by a container of batch"):
            await runtime.release(kept.url.replace(runtime.batch, "other"))
        await runtime.release(adopted.url)  # as a resumed runner does when its rollout ends
        left = _labelled("ps -a", runtime.batch)
        assert len(left) == 2 and not _exists(folder)
        assert all(_inspect("container", c)["Config"]["Labels"]["proctor.rollout"] != project
                   for c in left)  # fmt: skip
        assert len(_labelled("network ls", runtime.batch)) == 1
        assert _exists(kept.url.removeprefix("unix://"))
    assert _labelled("ps -a", runtime.batch) == [] and _labelled("network ls", runtime.batch) == []


async def test_an_unhealthy_service_fails_provisioning_and_its_project_is_removed(
    tmp_path: Path, image: str, options: dict[str, Any]
) -> None:
    (tmp_path / "compose.yaml").write_text(
        f"""
services:
  db:
    image: {image}
    command: python -c "import time; time.sleep(60)"
    healthcheck: {{test: [CMD, python, -c, "raise SystemExit(3)"], interval: 100ms, retries: 2}}
  main:
    image: {image}
    depends_on: {{db: {{condition: service_healthy}}}}
"""
    )
    runtime = ComposeRuntime(tmp_path / "compose.yaml", "/nowhere.py", **options)
    row = Task(env="x", id="x", slug="x")
    with pytest.raises(RuntimeLaunchError, match="service db unhealthy after 2 checks"):
        async with runtime(row):
            pass
    assert _labelled("ps -a", runtime.batch) == [] and _labelled("network ls", runtime.batch) == []


async def test_a_bring_up_cancelled_half_way_removes_what_it_started(
    tmp_path: Path, image: str, options: dict[str, Any]
) -> None:
    (tmp_path / "compose.yaml").write_text(
        f"""
services:
  db:
    image: {image}
    command: python -c "import time; time.sleep(60)"
    stop_grace_period: 0s
    healthcheck: {{test: [CMD, python, -c, "raise SystemExit(1)"], interval: 1s, retries: 1000}}
  main:
    image: {image}
    depends_on: {{db: {{condition: service_healthy}}}}
"""
    )
    runtime = ComposeRuntime(tmp_path / "compose.yaml", "/nowhere.py", **options)

    async def enter() -> None:
        async with runtime(Task(env="x", id="x", slug="x")):
            raise AssertionError("the project came up")

    bring_up = asyncio.ensure_future(enter())
    for _ in range(600):  # the db is running and checked: bring-up waits for it
        if _labelled("ps", runtime.batch) or bring_up.done():
            break
        await asyncio.sleep(0.1)
    assert not bring_up.done() and _labelled("network ls", runtime.batch)
    bring_up.cancel()
    with pytest.raises(asyncio.CancelledError):
        await bring_up
    assert _labelled("ps -a", runtime.batch) == [] and _labelled("network ls", runtime.batch) == []


@pytest.fixture
def conformance_folder(image: str, monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    """A short folder (Unix socket paths are short) made the default for `tempfile`,
    where the checker's markers go: it holds a Compose file of `main` and a sidecar,
    and is mounted at the same path in `main`."""
    folder = Path(tempfile.mkdtemp(prefix="pc-", dir="/tmp"))
    monkeypatch.setattr(tempfile, "tempdir", str(folder))
    (folder / "compose.yaml").write_text(
        f"""
services:
  sidecar:
    image: {image}
    command: python -c "import time; time.sleep(600)"
    stop_grace_period: 0s
  main:
    image: {image}
    volumes: ["./:{folder}"]
    depends_on: [sidecar]
"""
    )
    yield folder
    shutil.rmtree(folder, ignore_errors=True)


async def test_passes_the_conformance_suite(
    conformance_folder: Path, options: dict[str, Any]
) -> None:
    compose = conformance_folder / "compose.yaml"
    runtime = ComposeRuntime(compose, conformance_env.SOURCE, **options)
    report = await check_runtime(runtime, conformance_env.echo(text="hello"))
    assert report.notes == []  # markers seen: tasks closed and shutdown hooks ran
    assert report.checks == list(RUNTIME_CHECKS)
    assert _labelled("ps -a", runtime.batch) == [] and _labelled("network ls", runtime.batch) == []
