"""A cold environment server loads only what serving needs; `import proctor` next to nothing.

Issue 25 item 5: the rollout API (models, the engine, the batch runner, pydantic, ...)
made every `python -m proctor.serve` child import hundreds of modules it never uses.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from proctor import Task
from proctor.channel import connect
from proctor.runtimes import SubprocessRuntime

ENV_SOURCE = """
import json, sys
from proctor import Environment

env = Environment("cold-env")


@env.template
async def modules():
    yield json.dumps(sorted(sys.modules))
    yield 1.0
"""

# What a child that only serves a bare environment must not load: the driver's layers,
# the rollout API's dependencies, and the servers of capabilities it does not add.
FORBIDDEN = (
    "proctor.agents",
    "proctor.batch",
    "proctor.channel._client",
    "proctor.engine",
    "proctor.env._browser",
    "proctor.env._desktop",
    "proctor.env._mcp",
    "proctor.env._shell",
    "proctor.env._user",
    "proctor.env._workspace",
    "proctor.env._workspace_diff",
    "proctor.importers",
    "proctor.models",
    "proctor.proxy",
    "proctor.runtimes",
    "proctor.samples",
    "proctor.store",
    "proctor.tasks",
    "proctor.testing",
    "proctor.view",
    "proctor._http",
    "anthropic",
    "httpx",
    "jinja2",
    "openai",
    "pydantic",
    "ray",
)
# `import proctor` in a fresh interpreter: proctor, its lazy loader and a few stdlib
# modules the loader needs (8 on CPython 3.11). Room for a couple more, not for a layer.
IMPORT_PROCTOR_AT_MOST = 12


def _forbidden(modules: list[str]) -> list[str]:
    return [m for m in modules if any(m == f or m.startswith(f"{f}.") for f in FORBIDDEN)]


@pytest.fixture
def source(tmp_path: Path) -> Path:
    path = tmp_path / "cold_env.py"
    path.write_text(ENV_SOURCE)
    return path


async def test_a_cold_server_loads_only_what_serving_needs(source: Path) -> None:
    task = Task(env="cold-env", id="modules")
    async with SubprocessRuntime(source)(task) as endpoint:
        connecting = connect(endpoint.target, token=endpoint.token)
        async with connecting as client:
            started = await client.start_task("modules")
    loaded = json.loads(started["prompt"])
    assert "proctor.channel._serve" in loaded and "proctor.env._environment" in loaded
    assert _forbidden(loaded) == []


def test_import_proctor_loads_almost_nothing() -> None:
    code = (
        "import sys; before = set(sys.modules); import proctor;"
        "print('\\n'.join(sorted(set(sys.modules) - before)))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    added = out.stdout.split()
    assert len(added) <= IMPORT_PROCTOR_AT_MOST, added
    assert [m for m in added if m.startswith("proctor.")] == ["proctor._public"]


def test_the_check_sees_a_forbidden_module() -> None:
    assert _forbidden(["proctor.env", "proctor.models._types", "pydantic", "proctor.viewer"]) == [
        "proctor.models._types",
        "pydantic",
    ]
