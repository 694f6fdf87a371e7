"""The environment a HUD process runs with in the tests: ours without HUD settings,
keys or tokens, HUD's telemetry off and every HUD URL pointed at a closed port."""

from __future__ import annotations

import os
import shutil
from collections.abc import Mapping, Sequence
from pathlib import Path

CLOSED_PORT = "http://127.0.0.1:9"
HUD_URL_VARS = (
    "HUD_TELEMETRY_URL",
    "HUD_API_URL",
    "HUD_WEB_URL",
    "HUD_GATEWAY_URL",
    "HUD_RUNTIME_URL",
    "HUD_RL_URL",
)


def scrubbed_environ(home: Path, spans: Path) -> dict[str, str]:
    """os.environ without HUD settings, API keys or tokens, plus the network-safety
    settings; HUD's home under `home`, its local spans under `spans`."""
    env = {
        key: value
        for key, value in os.environ.items()
        if not key.startswith(("HUD_", "AWS_"))
        and not key.endswith(("_API_KEY", "_TOKEN"))
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
    """`argv` run with exactly `environ`: `SubprocessRuntime(env=...)` only adds
    variables to the parent's environment, so removing ours takes `env -i`."""
    env_bin = shutil.which("env") or "/usr/bin/env"
    return [env_bin, "-i", *(f"{k}={v}" for k, v in environ.items()), *argv]
