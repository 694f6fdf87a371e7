"""`proctor._http` exports what it says and imports nothing heavy."""

from __future__ import annotations

import subprocess
import sys

import proctor._http


def test_every_export_resolves() -> None:
    for name in proctor._http.__all__:
        assert getattr(proctor._http, name) is not None, name


def test_import_is_light() -> None:
    code = (
        "import sys, proctor._http;"
        "print(sorted(m for m in ('pydantic', 'h11', 'httpx', 'openai') if m in sys.modules))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]"
