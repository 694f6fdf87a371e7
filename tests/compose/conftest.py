"""Fixtures for the Compose tests: a podman gate and this machine's Python image."""

from __future__ import annotations

import os
import shutil
import subprocess
from typing import Any

import pytest

RUNC = "/usr/sbin/runc"  # crun fails on these hosts' cgroups; podman takes runc by path


@pytest.fixture(scope="session")
def image() -> str:
    """`python_image()` (proctor and this interpreter), or a skip without podman."""
    if shutil.which("podman") is None:
        pytest.skip("podman is not installed")
    if subprocess.run(["podman", "info"], capture_output=True, timeout=60).returncode != 0:
        pytest.skip("podman is installed but `podman info` fails")
    from proctor.runtimes import python_image

    return python_image(engine="podman")


@pytest.fixture(scope="session")
def options(image: str) -> dict[str, Any]:
    """Options every ComposeRuntime here gets."""
    return (
        {"engine": "podman", "oci_runtime": RUNC} if os.path.exists(RUNC) else {"engine": "podman"}
    )
