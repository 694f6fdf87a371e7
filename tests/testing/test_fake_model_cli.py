"""`python -m proctor.testing.fake_model`: its help says what it serves and how to use it."""

from __future__ import annotations

import asyncio
import json
import subprocess
import sys

import proctor

COMMAND = [sys.executable, "-m", "proctor.testing.fake_model"]


def test_help_says_what_it_serves_and_which_model_string_to_use() -> None:
    out = subprocess.run(
        [*COMMAND, "--help"], capture_output=True, text=True, check=True, timeout=60
    ).stdout
    for api in ("/v1/chat/completions", "/v1/responses", "/v1/messages"):
        assert api in out
    assert "fake/fake-model@http://127.0.0.1:PORT/v1" in out
    assert "openai/<any>@URL" in out
    assert "SIGINT" in out


async def test_the_printed_model_string_drives_a_model_client() -> None:
    proc = await asyncio.create_subprocess_exec(
        *COMMAND, "--port", "0", stdout=asyncio.subprocess.PIPE
    )
    try:
        assert proc.stdout is not None
        async with asyncio.timeout(30):
            info = json.loads(await proc.stdout.readline())
        assert info["model"] == f"fake/fake-model@{info['url']}"
        async with proctor.model_client(info["model"]) as client:
            reply = await client.complete([{"role": "user", "content": "hello"}])
        assert reply.content == "echo: hello"
    finally:
        if proc.returncode is None:
            proc.kill()
        await proc.wait()
