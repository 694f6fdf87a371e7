"""A Harbor task that ships a Compose file (examples/compose/stock-task) runs in a
project of its own: through `HarborRuntime`, `proctor run` and `proctor validate`."""

from __future__ import annotations

import asyncio
import importlib.util
import json
import os
import subprocess
import sys
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from proctor import rollout
from proctor.batch import list_rollouts
from proctor.importers import HarborRuntime, harbor_tasks
from proctor.testing import FakeModelServer, Reply
from proctor.view import ViewServer

EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "compose"
TASK = EXAMPLE / "stock-task"


# HarborRuntime's images: the task's own, and with proctor layered on (a new one for
# each proctor source edit: those the module made are removed after it).
REPOSITORIES = ("localhost/proctor-harbor-task", "localhost/proctor-harbor")


def _images() -> set[str]:
    argv = ["podman", "images", "-q", *(f"--filter=reference={r}" for r in REPOSITORIES)]
    return set(subprocess.run(argv, capture_output=True, text=True, check=False).stdout.split())


@pytest.fixture(scope="module")
def base(image: str) -> Iterator[str]:
    """The example's base image (this machine's Python and bash), built by base.py."""
    spec = importlib.util.spec_from_file_location("compose_example_base", EXAMPLE / "base.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    before = _images()
    yield str(module.build_base("podman"))
    if made := _images() - before:
        subprocess.run(["podman", "rmi", "-f", *made], capture_output=True, check=False)


def _services() -> list[str]:
    argv = ["podman", "ps", "-a", "-q", "--filter=label=proctor.service"]
    return subprocess.run(argv, capture_output=True, text=True, check=True).stdout.split()


def test_a_harbor_row_names_its_compose_file() -> None:
    (row,) = harbor_tasks(TASK)
    assert row.runtime_config is not None
    assert row.runtime_config["harbor"]["compose"] == str(
        TASK / "environment" / "docker-compose.yaml"
    )


@pytest.mark.slow
@pytest.mark.timeout(300)
async def test_the_grader_queries_the_database_service(base: str, options: dict[str, Any]) -> None:
    class Agent:
        def __init__(self, command: str) -> None:
            self.command = command

        async def __call__(self, run: object) -> None:
            from proctor.env import ShellClient

            await ShellClient(run.binding("shell").url).run(self.command)  # type: ignore[attr-defined]

    solve = (TASK / "solution" / "solve.sh").read_text()
    async with HarborRuntime(**options) as runtime:
        (row,) = harbor_tasks(TASK)
        solved = await rollout(row, Agent(solve), runtime=runtime)
        wrong = await rollout(row, Agent("echo 41 > /app/answer.txt"), runtime=runtime)
    assert solved.grade is not None and solved.grade.reward == 1.0, solved.error
    assert wrong.grade is not None and wrong.grade.reward == 0.0, wrong.error
    assert _services() == []


async def _page(out: Path, rollout_id: str) -> str:
    """The rollout's page on the dashboard."""
    async with ViewServer([out]) as view:
        url = f"{view.url}b/{out.name}/r/{rollout_id}"
        with await asyncio.to_thread(urllib.request.urlopen, url, timeout=30) as page:
            return str(page.read().decode())


@pytest.mark.slow
@pytest.mark.timeout(400)
async def test_proctor_run_and_validate_take_the_task(base: str, tmp_path: Path) -> None:
    """A model (the fake server) solves it through `proctor run`: recorded, shown, on
    the dashboard and exported; then `validate --oracle` runs the task's own solution."""
    conf = tmp_path / "containers.conf"  # crun fails on these hosts' cgroups
    conf.write_text('[engine]\nruntime = "runc"\n')
    env = {**os.environ, "CONTAINERS_CONF": str(conf)}
    proctor = [sys.executable, "-m", "proctor.cli"]
    out = tmp_path / "out"
    solve = (TASK / "solution" / "solve.sh").read_text()
    async with FakeModelServer([Reply.tool("shell", command=solve), "done"]) as fake:
        code, stdout, stderr = await _cli(
            [*proctor, "run", str(TASK), "--model", f"vllm/served@{fake.url}", "--json",
             "--output-dir", str(out)],
            tmp_path, env,
        )  # fmt: skip
    assert code == 0, stdout + stderr
    assert '"mean_reward": 1.0' in stdout
    (record,) = list_rollouts(out, limit=None)
    assert (record["status"], record["reward"]) == ("completed", 1.0)
    code, shown, stderr = await _cli([*proctor, "show", str(out)], tmp_path, env)
    assert code == 0 and "completed" in shown, stderr
    page = await _page(out, str(record["id"]))
    assert "apples" in page  # the instruction the model was given
    code, exported, stderr = await _cli([*proctor, "export", str(out)], tmp_path, env)
    assert code == 0, stderr
    (sample,) = [json.loads(line) for line in exported.splitlines()]
    assert sample["reward"] == 1.0
    code, checked, stderr = await _cli(
        [*proctor, "validate", str(TASK), "--oracle", "--json"], tmp_path, env
    )
    assert code == 0, checked + stderr
    assert '"broken": 0' in checked
    assert _services() == []


async def _cli(argv: list[str], cwd: Path, env: dict[str, str]) -> tuple[int, str, str]:
    """The command in a child process while this loop serves the fake model."""
    proc = await asyncio.create_subprocess_exec(
        *argv, cwd=cwd, env=env, stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE
    )
    out, err = await asyncio.wait_for(proc.communicate(), 300)
    assert proc.returncode is not None
    return proc.returncode, out.decode(), err.decode()
