"""Reading an output folder does not load the runner: `proctor.store` stands low in the
layers, and the dashboard and the samples read through it (checked in a fresh
interpreter: `sys.modules` after the import)."""

from __future__ import annotations

import subprocess
import sys

import pytest

RUNNER = ("proctor.batch", "proctor.engine", "proctor.agents", "proctor.runtimes")


def _loaded(module: str) -> set[str]:
    code = f"import sys, {module}; print('\\n'.join(sys.modules))"
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True, timeout=120
    ).stdout
    return set(out.split())


@pytest.mark.parametrize("module", ["proctor.view", "proctor.samples", "proctor.store"])
def test_readers_do_not_load_the_runner(module: str) -> None:
    loaded = _loaded(module)
    assert module in loaded
    assert sorted(m for m in loaded if m.startswith(RUNNER)) == []


def test_the_store_loads_only_the_leaves() -> None:
    ours = {m for m in _loaded("proctor.store") if m.startswith("proctor.")}
    # (the names load lazily: importing the package alone may not need `_errors` yet)
    assert {m for m in ours if not m.startswith("proctor.store")} <= {
        "proctor._errors",
        "proctor._public",
    }
