"""The loopback port an OpenEnv app is served on answers only this process's user:
another local user (uid nobody) gets 403 and never reaches an episode."""

from __future__ import annotations

import asyncio
import os
import shutil
import subprocess
import urllib.request
from typing import Any

import pytest

from proctor.importers import OpenEnvServer

NOBODY = ["setpriv", "--reuid=65534", "--regid=65534", "--clear-groups"]


async def app(scope: dict[str, Any], receive: Any, send: Any) -> None:
    """A stand-in OpenEnv app: every HTTP request gets its schema."""
    if scope["type"] == "lifespan":
        while (await receive())["type"] != "lifespan.shutdown":
            await send({"type": "lifespan.startup.complete"})
        await send({"type": "lifespan.shutdown.complete"})
        return
    await send({"type": "http.response.start", "status": 200, "headers": []})
    await send({"type": "http.response.body", "body": b'{"action": {}}'})


PROBE = """
import sys, urllib.error, urllib.request
try:
    print(urllib.request.urlopen(sys.argv[1], timeout=10).status)
except urllib.error.HTTPError as exc:
    print(exc.code)
"""


def _status(url: str, *prefix: str) -> str:
    argv = [*prefix, "/usr/bin/python3", "-c", PROBE, url]
    return subprocess.run(argv, capture_output=True, text=True, timeout=30, check=True).stdout


def _get(url: str) -> int:
    with urllib.request.urlopen(url, timeout=10) as response:
        return int(response.status)


@pytest.mark.skipif(
    os.geteuid() != 0 or shutil.which("setpriv") is None, reason="needs root and setpriv"
)
async def test_another_local_user_is_refused_and_we_are_served() -> None:
    server = OpenEnvServer(app=app)
    await server.start()
    try:
        url = f"{server.base_url}/schema"
        assert (await asyncio.to_thread(_status, url)).strip() == "200"
        assert (await asyncio.to_thread(_status, url, *NOBODY)).strip() == "403"
        assert await asyncio.to_thread(_get, url) == 200  # and this process itself
    finally:
        await server.stop()
