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


def test_http_reads_sockets_like_the_wire_without_importing_it() -> None:
    # One BufferedReads serves both (it used to be copied); _http must not load the wire.
    code = (
        "import sys, proctor._reads as r, proctor._http._connection as s,"
        " proctor._http._client as c;"
        "print('proctor.channel' in sys.modules,"
        " issubclass(s.Connection, r.BufferedReads), issubclass(c._Connection, r.BufferedReads))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.split() == ["False", "True", "True"]
    from proctor._reads import BufferedReads
    from proctor.channel._reads import BufferedReads as WireReads

    assert WireReads is BufferedReads
