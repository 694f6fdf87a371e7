"""Fixtures for the CLI tests (helpers live in `cli_helpers`)."""

from __future__ import annotations

import socket
from collections.abc import Iterator

import pytest
from cli_helpers import LETTERS, Served, serve


@pytest.fixture
def served() -> Iterator[Served]:
    """The letters environment served in a child process, stopped after the test."""
    server = serve(LETTERS / "env.py")
    try:
        yield server
    finally:
        code, err = server.stop()
        assert code == 0, err
        assert "Traceback" not in err, err


@pytest.fixture
def dead_url() -> str:
    """A loopback address where nothing listens."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    return f"tcp://127.0.0.1:{port}"
