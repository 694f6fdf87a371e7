"""Issue 8, finding 4: the proxy checks the secret from the request head, before reading
the body, and bounds how long a body may take."""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import time
from collections.abc import AsyncIterator
from urllib.parse import urlsplit

import pytest

from proctor.proxy import HttpLimits, InterceptionProxy
from proctor.testing import FakeModelServer

MiB = 1024 * 1024


@pytest.fixture
async def proxy() -> AsyncIterator[InterceptionProxy]:
    async with (
        FakeModelServer() as fake,
        InterceptionProxy(fake.url, http_limits=HttpLimits(body_timeout=0.5)) as p,
    ):
        yield p


def head(path: str, length: int, auth: str) -> bytes:
    return (
        f"POST {path} HTTP/1.1\r\nHost: x\r\n{auth}\r\n"
        f"Content-Type: application/json\r\nContent-Length: {length}\r\n\r\n"
    ).encode()


async def answer(reader: asyncio.StreamReader) -> tuple[int, dict[str, str], bytes]:
    raw = await asyncio.wait_for(reader.readuntil(b"\r\n\r\n"), 5)
    lines = raw.decode("latin-1").split("\r\n")
    headers = dict(line.lower().split(": ", 1) for line in lines[1:-2])
    body = await asyncio.wait_for(reader.readexactly(int(headers["content-length"])), 5)
    return int(lines[0].split(" ")[1]), headers, body


def port(proxy: InterceptionProxy) -> int:
    return urlsplit(proxy.base_url).port or 0


def rss() -> int:
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")


async def test_an_unknown_secret_is_refused_from_the_head(proxy: InterceptionProxy) -> None:
    reader, writer = await asyncio.open_connection("127.0.0.1", port(proxy))
    try:
        writer.write(head("/v1/chat/completions", 64 * MiB, "Authorization: Bearer nope"))
        status, headers, body = await answer(reader)  # without sending a byte of body
        assert status == 401 and json.loads(body)["error"]["code"] == "invalid_api_key"
        assert headers["connection"] == "close" and headers["x-should-retry"] == "false"
        assert await asyncio.wait_for(reader.read(), 5) == b""
    finally:
        writer.close()

    session = proxy.open_session()
    session.close()
    reader, writer = await asyncio.open_connection("127.0.0.1", port(proxy))
    try:
        writer.write(head("/v1/messages", 64 * MiB, f"x-api-key: {session.secret}"))
        status, headers, body = await answer(reader)
        assert status == 409 and headers["x-proctor-error"] == "rollout_ended"
    finally:
        writer.close()


async def test_bodies_without_a_secret_are_never_buffered(proxy: InterceptionProxy) -> None:
    """8 connections each pushing 16 MiB with a bad secret: the proxy holds none of it."""
    chunk = b"x" * MiB
    peak = before = rss()
    done = asyncio.Event()

    async def sample() -> None:
        nonlocal peak
        while not done.is_set():
            peak = max(peak, rss())
            await asyncio.sleep(0.005)

    async def push() -> int:
        reader, writer = await asyncio.open_connection("127.0.0.1", port(proxy))
        try:
            writer.write(head("/v1/chat/completions", 16 * MiB, "Authorization: Bearer bad"))
            with contextlib.suppress(ConnectionError):
                for _ in range(16):
                    writer.write(chunk)
                    await writer.drain()
            return (await answer(reader))[0]
        finally:
            writer.close()

    sampler = asyncio.create_task(sample())
    try:
        statuses = await asyncio.gather(*(push() for _ in range(8)))
    finally:
        done.set()
        await sampler
    assert statuses == [401] * 8
    assert peak - before < 40 * MiB  # the old proxy held all 128 MiB before answering


async def test_a_trickled_body_is_cut_off(proxy: InterceptionProxy) -> None:
    session = proxy.open_session()
    reader, writer = await asyncio.open_connection("127.0.0.1", port(proxy))

    async def trickle() -> None:  # 5 B/s
        with contextlib.suppress(ConnectionError):
            for _ in range(100):
                writer.write(b"{    ")
                await writer.drain()
                await asyncio.sleep(1)

    t0 = time.monotonic()
    writer.write(head("/v1/chat/completions", 1000, f"Authorization: Bearer {session.secret}"))
    sender = asyncio.create_task(trickle())
    try:
        status, headers, _ = await answer(reader)
    finally:
        sender.cancel()
        writer.close()
    assert status == 408 and headers["connection"] == "close"
    assert time.monotonic() - t0 < 3
    assert session.turns == [] and session.admitted == 0  # never a turn
