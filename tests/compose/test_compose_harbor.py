"""A Harbor task that ships a Compose file (examples/compose/stock-task) runs in a
project of its own: through `HarborRuntime`, `proctor run` and `proctor validate`."""

from __future__ import annotations

import importlib.util
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from proctor import rollout
from proctor.importers import HarborRuntime, harbor_tasks

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


AGENT = """
from proctor.env import ShellClient

SOLVE = open(%r).read()


async def solve(run):
    await ShellClient(run.binding("shell").url).run(SOLVE)
"""


@pytest.mark.slow
@pytest.mark.timeout(400)
def test_proctor_run_and_validate_take_the_task(base: str, tmp_path: Path) -> None:
    (tmp_path / "agent.py").write_text(AGENT % str(TASK / "solution" / "solve.sh"))
    conf = tmp_path / "containers.conf"  # crun fails on these hosts' cgroups
    conf.write_text('[engine]\nruntime = "runc"\n')
    env = {**os.environ, "CONTAINERS_CONF": str(conf)}
    proctor = [sys.executable, "-m", "proctor.cli"]
    ran = subprocess.run(
        [*proctor, "run", str(TASK), "--agent", "agent.py:solve", "--json", "--no-record"],
        capture_output=True, text=True, timeout=300, cwd=tmp_path, env=env,
    )  # fmt: skip
    assert ran.returncode == 0, ran.stdout + ran.stderr
    assert '"mean_reward": 1.0' in ran.stdout
    checked = subprocess.run(
        [*proctor, "validate", str(TASK), "--oracle", "--json"],
        capture_output=True, text=True, timeout=300, cwd=tmp_path, env=env,
    )  # fmt: skip
    assert checked.returncode == 0, checked.stdout + checked.stderr
    assert '"broken": 0' in checked.stdout
    assert _services() == []
