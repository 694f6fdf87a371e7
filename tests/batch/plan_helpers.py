"""A tiny environment, taskset and config on disk, for the config and plan tests.

(A uniquely named module, not `conftest`: the batch store tests live beside these.)
"""

from __future__ import annotations

import json
import textwrap
from pathlib import Path
from typing import Any

ENV = """
from proctor import Environment, graders

mini = Environment("mini", version="1.2.0")


@mini.template
async def add(a: int, b: int):
    answer = yield f"What is {a} + {b}?"
    yield graders.numeric(answer, a + b)


@mini.template
async def echo(text: str):
    answer = yield f"Say {text}"
    yield graders.exact(answer, text)


async def solver(run):
    pass
"""

ROWS = [
    {"env": "mini", "id": "add", "args": {"a": 1, "b": 2}, "slug": "add-1-2"},
    {"env": "mini", "id": "add", "args": {"a": 3, "b": 4}, "slug": "add-3-4"},
    {"env": "mini", "id": "echo", "args": {"text": "hi"}, "slug": "echo-hi"},
]


def workspace(root: Path, rows: list[dict[str, Any]] | None = None) -> Path:
    """Write `env.py` and `tasks.json` under `root`; returns `root`."""
    (root / "env.py").write_text(textwrap.dedent(ENV))
    (root / "tasks.json").write_text(json.dumps(ROWS if rows is None else rows, indent=2))
    return root


def config(**overrides: Any) -> dict[str, Any]:
    """A good config for the workspace: 3 rows x 1 Python agent, subprocess runtime.

    A subprocess, not the default: that is a sandbox only where bwrap is installed,
    and as root a sandbox cannot read a private folder such as `tmp_path` (the plan
    says so); the tests of the default are in test_isolation.py.
    """
    base: dict[str, Any] = {
        "taskset": {"source": "tasks.json", "env_source": "env.py"},
        "agents": [{"kind": "python", "agent": "env.py:solver"}],
        "runtime": {"kind": "subprocess"},
        "max_concurrent": 2,
        "expected_rollouts": 3,
    }
    base.update(overrides)
    return base


def write_json(root: Path, data: dict[str, Any], name: str = "batch.json") -> Path:
    """`data` as an indented JSON file under `root`."""
    path = root / name
    path.write_text(json.dumps(data, indent=2))
    return path
