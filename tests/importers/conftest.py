"""Fixtures for the importer tests: a podman gate and a shell-bearing base image.

Harbor task images here are `FROM` a local image of this machine's Python and bash
(no proctor: `HarborRuntime` layers it on), built by `python_image`; Docker Hub is
never reached.
"""

from __future__ import annotations

import os
import shutil
import subprocess
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

RUNC = "/usr/sbin/runc"  # crun fails on these hosts' cgroups; podman takes runc by path
BASE_REPOSITORY = "localhost/proctor-harbor-test-base"
# HarborRuntime's images: the tasks' own, and with proctor layered on.
REPOSITORIES = ("localhost/proctor-harbor-task", "localhost/proctor-harbor")


def _podman_problem() -> str | None:
    """Why podman cannot run containers here, or None."""
    if shutil.which("podman") is None:
        return "podman is not installed"
    try:
        info = subprocess.run(["podman", "info"], capture_output=True, text=True, timeout=60)
    except subprocess.TimeoutExpired:
        return "`podman info` did not answer within 60s"
    if info.returncode != 0:
        last = (info.stderr.strip().splitlines() or ["?"])[-1]
        return f"podman is installed but `podman info` fails: {last}"
    return None


def _images(repository: str) -> set[str]:
    argv = ["podman", "images", "-q", "--filter", f"reference={repository}"]
    return set(subprocess.run(argv, capture_output=True, text=True, check=False).stdout.split())


@pytest.fixture(scope="session")
def podman() -> Iterator[str]:
    """The engine; the Harbor images the session built are removed after it."""
    problem = _podman_problem()
    if problem is not None:
        pytest.skip(problem)
    before = {repository: _images(repository) for repository in REPOSITORIES}
    yield "podman"
    for repository, images in before.items():  # each proctor source edit makes a new one
        if made := _images(repository) - images:
            subprocess.run(["podman", "rmi", "-f", *made], capture_output=True, check=False)


@pytest.fixture(scope="session")
def runtime_options(podman: str) -> dict[str, Any]:
    """Options every HarborRuntime here gets."""
    if os.path.exists(RUNC):
        return {"engine": podman, "oci_runtime": RUNC}
    return {"engine": podman}


def _libraries(binary: str) -> list[str]:
    out = subprocess.run(["ldd", binary], capture_output=True, text=True, check=True).stdout
    return [part for line in out.splitlines() for part in line.split() if part.startswith("/")]


@pytest.fixture(scope="session")
def base_image(podman: str) -> str:
    """This interpreter and bash, without proctor."""
    from proctor.runtimes import python_image

    bash = shutil.which("bash")
    assert bash is not None
    paths = [bash, *_libraries(bash)]
    return python_image(engine="podman", distributions=(), paths=paths, repository=BASE_REPOSITORY)


@pytest.fixture
def make_task(tmp_path: Path) -> Callable[..., Path]:
    """`make_task(name, base)`: a task folder under tmp_path (see `_write_task`)."""

    def make(name: str, base: str = "localhost/unused", **options: Any) -> Path:
        return _write_task(tmp_path / "tasks", name, base, **options)

    return make


def _write_task(
    root: Path, name: str, base: str, *, verifier_timeout: float = 60, internet: bool = False
) -> Path:
    """A Harbor task: write `hello` to /app/answer.txt; test.sh checks it."""
    task = root / name
    (task / "environment").mkdir(parents=True)
    (task / "tests").mkdir()
    (task / "solution").mkdir()
    (task / "task.toml").write_text(
        'version = "1.0"\n\n[metadata]\ndifficulty = "easy"\ntags = ["test"]\n\n'
        f"[verifier]\ntimeout_sec = {verifier_timeout}\n"
        'env = { EXPECTED = "hello", KEY = "${OPENAI_API_KEY}" }\n\n'
        "[agent]\ntimeout_sec = 120.0\n\n"
        f"[environment]\nallow_internet = {str(internet).lower()}\n"
    )
    (task / "instruction.md").write_text("Write the word hello into /app/answer.txt.\n")
    (task / "environment" / "Dockerfile").write_text(
        f"FROM {base}\nWORKDIR /app\nENV GREETING=hello\n"
    )
    (task / "tests" / "test.sh").write_text(
        "#!/bin/bash\n"
        'answer=""\n'
        "[ -f /app/answer.txt ] && read -r answer < /app/answer.txt\n"
        'echo "got: $answer"\n'
        'if [ "$answer" = "$EXPECTED" ]; then echo 1 > /logs/verifier/reward.txt; '
        "else echo 0 > /logs/verifier/reward.txt; fi\n"
    )
    (task / "solution" / "solve.sh").write_text("#!/bin/bash\necho hello > /app/answer.txt\n")
    return task
