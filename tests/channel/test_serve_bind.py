"""Serving off loopback without a token is refused, and the refusal says how to give one."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from _support.echo_env import make_echo_env
from proctor.channel import EnvServer

LETTERS = Path(__file__).resolve().parents[2] / "examples" / "letters" / "env.py"


async def test_the_library_refusal_names_the_token() -> None:
    server = EnvServer(make_echo_env())
    try:
        with pytest.raises(ValueError, match=r"requires a token.*--token-env.*token="):
            await server.listen("0.0.0.0", 0)
    finally:
        await server.aclose()


@pytest.mark.parametrize("command", [["proctor.serve"], ["proctor.cli", "serve"]])
def test_the_command_line_refusal_names_token_env(command: list[str]) -> None:
    result = subprocess.run(
        [sys.executable, "-m", *command, str(LETTERS), "--host", "0.0.0.0"],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert result.returncode == 1, result.stderr
    assert "0.0.0.0 (not loopback) requires a token" in result.stderr
    assert "--token-env VAR" in result.stderr
