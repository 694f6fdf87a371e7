"""The server and client on uvloop, whose transports are not asyncio.Transport subclasses."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator

import orjson
import pytest
from http_helpers import TIMEOUT, Raw

from proctor._http import HttpClient, HttpServer, Request, Response

uvloop = pytest.importorskip("uvloop")


async def handler(request: Request) -> Response:
    if request.path == "/stream":

        async def parts() -> AsyncIterator[bytes]:
            yield b"a"
            yield b"b"

        return Response(body=parts())
    return Response.json({"body": request.body.decode()})


async def exchange() -> None:
    async with HttpServer(handler) as server:
        raw = await Raw.open(server.port)
        await raw.send(
            b"POST / HTTP/1.1\r\nContent-Length: 2\r\n\r\nhiGET /stream HTTP/1.1\r\n\r\n"
        )
        assert orjson.loads((await raw.response())[2]) == {"body": "hi"}
        assert (await raw.response())[2] == b"ab"
        await raw.close()


def test_server_on_uvloop() -> None:
    with asyncio.Runner(loop_factory=uvloop.new_event_loop) as runner:
        runner.run(asyncio.wait_for(exchange(), TIMEOUT))


async def client_exchange() -> None:
    async with HttpServer(handler) as server, HttpClient() as client:
        for _ in range(2):
            resp = await client.request("POST", server.url, body=b"hi")
            await resp.read()
            assert resp.json() == {"body": "hi"}
        assert await (await client.request("GET", server.url + "/stream")).read() == b"ab"
        assert len(client._open) == 1


def test_client_on_uvloop() -> None:
    with asyncio.Runner(loop_factory=uvloop.new_event_loop) as runner:
        runner.run(asyncio.wait_for(client_exchange(), TIMEOUT))
