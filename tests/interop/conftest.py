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
import shutil
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path

import pytest

PEERS_VAR = "PROCTOR_PEERS_PYTHON"
HERE = Path(__file__).resolve().parent
PEER_SCRIPTS = HERE / "peer_scripts"
HUD_ENV_FILE = PEER_SCRIPTS / "hud_env.py"

CLOSED_PORT = "http://127.0.0.1:9"
HUD_URL_VARS = (
    "HUD_TELEMETRY_URL",
    "HUD_API_URL",
    "HUD_WEB_URL",
    "HUD_GATEWAY_URL",
    "HUD_RUNTIME_URL",
    "HUD_RL_URL",
)


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


def scrubbed_environ(home: Path, spans: Path) -> dict[str, str]:
    """os.environ without HUD settings or API keys, plus the network-safety settings."""
    env = {
        key: value
        for key, value in os.environ.items()
        if not key.startswith(("HUD_", "AWS_"))
        and not key.endswith("_API_KEY")
        and key not in ("PYTHONPATH", "VIRTUAL_ENV")
    }
    env.update(
        HOME=str(home),
        XDG_CONFIG_HOME=str(home / ".config"),
        XDG_CACHE_HOME=str(home / ".cache"),
        HUD_TELEMETRY_ENABLED="false",
        HUD_CLI_ANALYTICS_ENABLED="false",
        HUD_FILE_TRACKING_ENABLED="false",
        HUD_SKIP_VERSION_CHECK="1",
        HUD_TELEMETRY_LOCAL_DIR=str(spans),
        PYTHONUNBUFFERED="1",
    )
    env.update(dict.fromkeys(HUD_URL_VARS, CLOSED_PORT))
    return env


def exact_env_argv(environ: Mapping[str, str], argv: Sequence[str]) -> list[str]:
    """`argv` run with exactly `environ`.

    `SubprocessRuntime(env=...)` only adds variables to the parent's environment, so
    removing ours (HUD_API_KEY above all) takes `env -i`.
    """
    env_bin = shutil.which("env") or "/usr/bin/env"
    return [env_bin, "-i", *(f"{k}={v}" for k, v in environ.items()), *argv]


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
