"""Shared fixtures for the conformance-suite tests."""

from __future__ import annotations

import asyncio
import sys
from collections.abc import AsyncIterator

import pytest

from proctor.testing import conformance_env


@pytest.fixture
async def served_url() -> AsyncIterator[str]:
    """A `python -m proctor.serve` child of the conformance environment."""
    proc = await asyncio.create_subprocess_exec(
        sys.executable,
        "-m",
        "proctor.serve",
        conformance_env.SOURCE,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.DEVNULL,
    )
    try:
        assert proc.stdout is not None
        async with asyncio.timeout(30):
            line = await proc.stdout.readline()
        assert line.startswith(b"PROCTOR_SERVE_PORT="), line
        yield f"tcp://127.0.0.1:{int(line.split(b'=')[1])}"
    finally:
        proc.terminate()
        await proc.wait()
