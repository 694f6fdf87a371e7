"""The public surface of `proctor.models`: curated, and light to import."""

from __future__ import annotations

import subprocess
import sys

import proctor.models


def test_importing_models_does_not_load_the_sdks() -> None:
    code = (
        "import sys, proctor.models;"
        "print(sorted(m for m in ('openai', 'anthropic', 'httpx2') if m in sys.modules))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]"


def test_every_export_resolves() -> None:
    for name in proctor.models.__all__:
        assert getattr(proctor.models, name) is not None, name
