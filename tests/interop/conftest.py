"""Interop with the HUD SDK (hud==0.6.21), which lives in its own venv (`make peers`).

Every HUD process gets a scrubbed environment: no HUD_* or *_API_KEY variable of
ours survives, HOME and the span directory are private temp dirs, telemetry, CLI
analytics, file tracking and the PyPI version check are off, and every platform URL
points at a closed loopback port. Everything binds 127.0.0.1.

The tests skip when PROCTOR_PEERS_PYTHON is unset or missing (plain `pytest`); under
`make test` it is set and they must run.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from pathlib import Path

import pytest

from _support.hud_env import exact_env_argv, scrubbed_environ

PEERS_VAR = "PROCTOR_PEERS_PYTHON"
HERE = Path(__file__).resolve().parent
PEER_SCRIPTS = HERE / "peer_scripts"
HUD_ENV_FILE = PEER_SCRIPTS / "hud_env.py"


@pytest.fixture(scope="session")
def peers_python() -> str:
    """The interpreter of the venv that has hud installed, or skip."""
    value = os.environ.get(PEERS_VAR)
    if not value:
        pytest.skip(f"{PEERS_VAR} is not set: run `make test` (it builds .venv-peers with hud)")
    if not Path(value).exists():
        pytest.skip(f"{PEERS_VAR}={value} does not exist: run `make peers`")
    return value


@pytest.fixture(scope="session")
def hud_dirs(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """Private HOME, span dir and working dir for every HUD process of the session."""
    root = tmp_path_factory.mktemp("hud")
    dirs = {name: root / name for name in ("home", "spans", "cwd")}
    for path in dirs.values():
        path.mkdir()
    return dirs


@pytest.fixture(scope="session")
def hud_environ(hud_dirs: dict[str, Path]) -> dict[str, str]:
    """The complete environment a HUD process runs with."""
    return scrubbed_environ(hud_dirs["home"], hud_dirs["spans"])


@pytest.fixture(scope="session")
def hud_serve_argv(peers_python: str, hud_environ: dict[str, str]) -> Callable[..., list[str]]:
    """argv of HUD's own server for `peer_scripts/hud_env.py` on an ephemeral port.

    Call it with extra environment variables for the child, if any.
    """

    def argv(**extra: str) -> list[str]:
        serve = [peers_python, "-m", "hud.environment.server", str(HUD_ENV_FILE)]
        return exact_env_argv(
            {**hud_environ, **extra}, [*serve, "--host", "127.0.0.1", "--port", "0"]
        )

    return argv
