"""HttpClient against HttpServer and scripted raw servers on loopback."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator

import orjson
import pytest
from http_helpers import TIMEOUT, Scripted, Serve

from _support.waiting import until
from proctor._errors import HttpConnectError, HttpReadError, HttpTimeout
from proctor._http import Abort, Headers, HttpClient, Request, Response


async def echo(request: Request) -> Response:
    return Response.json(
        {
            "method": request.method,
            "target": request.target,
            "body": request.body.decode("latin-1"),
            "headers": request.headers.items(),
            "port": request.client[1] if request.client else None,
        }
    )


@pytest.fixture
async def client() -> AsyncIterator[HttpClient]:
    async with HttpClient(read_timeout=TIMEOUT) as client:
        yield client


async def test_round_trip_and_keep_alive(serve: Serve, client: HttpClient) -> None:
    server = await serve(echo)
    ports = set()
    for n in range(3):
        resp = await client.request(
            "POST", f"{server.url}/p?n={n}#frag", headers={"X-A": "b"}, body=b"hi"
        )
        assert (resp.status, resp.reason, resp.http_version) == (200, "OK", "HTTP/1.1")
        assert resp.headers.get("Content-Type") == "application/json"
        await resp.read()
        got = resp.json()
        assert (got["method"], got["target"], got["body"]) == ("POST", f"/p?n={n}", "hi")
        assert got["headers"] == [
            ["Host", f"127.0.0.1:{server.port}"],
            ["X-A", "b"],
            ["content-length", "2"],
        ]
        ports.add(got["port"])
    assert len(ports) == 1


async def test_get_sends_no_length_and_host_can_be_set(serve: Serve, client: HttpClient) -> None:
    server = await serve(echo)
    headers = Headers([("host", "example"), ("Content-Length", "99")])
    async with await client.request("GET", server.url, headers=headers) as resp:
        got = orjson.loads(await resp.read())
    assert got["target"] == "/"
    assert got["headers"] == [["host", "example"]]


async def test_aiter_bytes_streams_chunks_as_they_come(serve: Serve, client: HttpClient) -> None:
    step = asyncio.Event()

    async def parts() -> AsyncIterator[bytes]:
        yield b"one"
        await step.wait()
        yield b"two"

    async def handler(request: Request) -> Response:
        return Response(body=parts())

    server = await serve(handler)
    resp = await client.request("GET", server.url)
    it = resp.aiter_bytes()
    assert await anext(it) == b"one"
    step.set()
    assert [chunk async for chunk in it] == [b"two"]
    resp2 = await client.request("GET", server.url)  # the connection went back to the pool
    step.set()
    assert await resp2.read() == b"onetwo"
    assert [c async for c in resp2.aiter_bytes()] == [b"onetwo"]
    assert len(client._open) == 1


async def test_unread_body_means_a_new_connection(serve: Serve, client: HttpClient) -> None:
    server = await serve(echo)
    async with await client.request("GET", server.url) as resp:
        assert resp.status == 200
    with pytest.raises(RuntimeError, match="consumed"):
        await resp.read()
    first = (await (await client.request("GET", server.url)).read(), None)[0]
    second = await (await client.request("GET", server.url)).read()
    assert orjson.loads(first)["port"] == orjson.loads(second)["port"]
    assert len(server._connections) == 1  # the unread one was closed


async def test_json_before_read_is_an_error(serve: Serve, client: HttpClient) -> None:
    server = await serve(echo)
    resp = await client.request("GET", server.url)
    with pytest.raises(RuntimeError, match="read"):
        resp.json()
    await resp.aclose()


async def test_head_request_reuses_the_connection(serve: Serve, client: HttpClient) -> None:
    server = await serve(echo)
    resp = await client.request("HEAD", server.url)
    assert int(resp.headers.get("content-length") or 0) > 0
    assert await resp.read() == b""
    await (await client.request("GET", server.url)).read()
    assert len(client._open) == 1


async def test_large_body_with_backpressure(serve: Serve, client: HttpClient) -> None:
    block = bytes(range(256)) * 4096  # 1 MiB

    async def big() -> AsyncIterator[bytes]:
        for _ in range(8):
            yield block

    async def handler(request: Request) -> Response:
        return Response(body=big() if request.path == "/stream" else block * 8)

    server = await serve(handler)
    for path in ("/stream", "/"):
        resp = await client.request("GET", server.url + path)
        await asyncio.sleep(0.1)  # let the client fill its buffer and pause the socket
        total = 0
        async for chunk in resp.aiter_bytes():
            total += len(chunk)
        assert total == len(block) * 8


async def test_abort_mid_stream_is_a_read_error(serve: Serve, client: HttpClient) -> None:
    got_head = asyncio.Event()

    async def parts() -> AsyncIterator[bytes]:
        yield b"first"
        await got_head.wait()
        raise Abort

    async def handler(request: Request) -> Response:
        return Response(body=parts())

    server = await serve(handler)
    resp = await client.request("GET", server.url)
    got_head.set()
    with pytest.raises(HttpReadError, match="mid-response"):
        await resp.read()


async def test_abort_before_the_head_is_a_read_error(serve: Serve, client: HttpClient) -> None:
    calls = 0

    async def handler(request: Request) -> Response:
        nonlocal calls
        calls += 1
        raise Abort

    server = await serve(handler)
    with pytest.raises(HttpReadError):
        await client.request("POST", server.url, body=b"x")
    assert calls == 1  # a fresh connection is never retried


async def test_read_timeout_before_the_head(serve: Serve) -> None:
    async def slow(request: Request) -> Response:
        await asyncio.sleep(1)
        return Response()

    server = await serve(slow)
    async with HttpClient(read_timeout=0.05) as client:
        with pytest.raises(HttpTimeout):
            await client.request("GET", server.url)


async def test_read_timeout_mid_body(serve: Serve) -> None:
    async def parts() -> AsyncIterator[bytes]:
        yield b"a"
        await asyncio.sleep(1)
        yield b"b"

    async def handler(request: Request) -> Response:
        return Response(body=parts())

    server = await serve(handler)
    async with HttpClient(read_timeout=0.05) as client:
        resp = await client.request("GET", server.url)
        with pytest.raises(HttpTimeout):
            await resp.read()


async def test_connect_refused(client: HttpClient) -> None:
    probe = await asyncio.start_server(lambda r, w: None, "127.0.0.1", 0)
    port = probe.sockets[0].getsockname()[1]
    probe.close()
    await probe.wait_closed()
    with pytest.raises(HttpConnectError, match="cannot connect"):
        await client.request("GET", f"http://127.0.0.1:{port}/")


@pytest.mark.parametrize("url", ["ftp://x/", "localhost:80", "http://:80/", "http://h:8x/"])
async def test_bad_urls(client: HttpClient, url: str) -> None:
    with pytest.raises(ValueError):
        await client.request("GET", url)


async def test_header_injection_is_refused(client: HttpClient) -> None:
    with pytest.raises(ValueError, match="CR or LF"):
        await client.request("GET", "http://127.0.0.1:1/", headers={"X": "a\r\nY: b"})


async def ok(writer: asyncio.StreamWriter, body: bytes = b"ok") -> None:
    writer.write(b"HTTP/1.1 200 OK\r\nContent-Length: %d\r\n\r\n%b" % (len(body), body))
    await writer.drain()


async def test_stale_pooled_connection_is_retried_once(client: HttpClient) -> None:
    async def script(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await reader.readuntil(b"\r\n\r\n")
        await ok(writer)
        if server.connections == 1:
            await reader.readuntil(b"\r\n\r\n")  # then close without a byte: the race
        else:
            await reader.read()

    async with Scripted(script) as server:
        assert await (await client.request("GET", server.url)).read() == b"ok"
        assert await (await client.request("GET", server.url)).read() == b"ok"
        assert server.connections == 2


async def test_no_retry_once_a_response_byte_arrived(client: HttpClient) -> None:
    async def script(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await reader.readuntil(b"\r\n\r\n")
        await ok(writer)
        await reader.readuntil(b"\r\n\r\n")
        writer.write(b"HTTP/1.1 200 OK\r\nContent-")
        await writer.drain()

    async with Scripted(script) as server:
        await (await client.request("GET", server.url)).read()
        with pytest.raises(HttpReadError):
            await client.request("GET", server.url)
        assert server.connections == 1


async def test_retry_happens_only_once(client: HttpClient) -> None:
    async def script(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await reader.readuntil(b"\r\n\r\n")
        if server.connections == 1:
            await ok(writer)
            await reader.readuntil(b"\r\n\r\n")
        # every later connection closes on its request with no answer

    async with Scripted(script) as server:
        await (await client.request("GET", server.url)).read()
        with pytest.raises(HttpReadError):
            await client.request("GET", server.url)
        assert server.connections == 2


async def test_a_post_on_a_reused_connection_is_never_resent(client: HttpClient) -> None:
    requests = 0

    async def script(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        nonlocal requests
        await reader.readuntil(b"\r\n\r\n")
        requests += 1
        await ok(writer)
        await reader.readuntil(b"\r\n\r\n")  # the upstream has the request...
        requests += 1
        writer.transport.abort()  # ...and resets before answering

    async with Scripted(script) as server:
        await (await client.request("POST", server.url, body=b"")).read()
        with pytest.raises(HttpReadError, match="may have received"):
            await client.request("POST", server.url, body=b"")
        assert requests == 2 and server.connections == 1  # sent once, failed once


@pytest.mark.parametrize(
    "response",
    [
        b"HTTP/1.1 abc OK\r\n\r\n",
        b"HTTP/1.1 200 OK\r\nContent-Length: x\r\n\r\n",
        b"HTTP/1.1 200 OK\r\nBad Header\r\n\r\n",
        b"HTTP/1.1 200 OK\r\nX: " + b"y" * 300_000,
    ],
)
async def test_malformed_responses(client: HttpClient, response: bytes) -> None:
    async def script(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await reader.readuntil(b"\r\n\r\n")
        writer.write(response)
        await writer.drain()
        await reader.read()

    async with Scripted(script) as server:
        with pytest.raises(HttpReadError, match=r"malformed|too large"):
            await client.request("GET", server.url)


async def test_malformed_chunked_body(client: HttpClient) -> None:
    async def script(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await reader.readuntil(b"\r\n\r\n")
        writer.write(b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\nzz\r\n")
        await reader.read()

    async with Scripted(script) as server:
        resp = await client.request("GET", server.url)
        with pytest.raises(HttpReadError, match="malformed"):
            await resp.read()


async def test_body_until_close_and_interim_responses(client: HttpClient) -> None:
    async def script(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await reader.readuntil(b"\r\n\r\n")
        writer.write(b"HTTP/1.1 100 Continue\r\n\r\nHTTP/1.0 200 OK\r\n\r\nall of ")
        await writer.drain()
        await asyncio.sleep(0.01)
        writer.write(b"it")

    async with Scripted(script) as server:
        resp = await client.request("GET", server.url)
        assert resp.http_version == "HTTP/1.0"
        assert await resp.read() == b"all of it"
        await (await client.request("GET", server.url)).read()
        assert server.connections == 2


async def test_trailing_garbage_is_not_pooled(client: HttpClient) -> None:
    async def script(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await reader.readuntil(b"\r\n\r\n")
        writer.write(b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nokEXTRA")
        await reader.read()

    async with Scripted(script) as server:
        assert await (await client.request("GET", server.url)).read() == b"ok"
        assert await (await client.request("GET", server.url)).read() == b"ok"
        assert server.connections == 2


async def test_max_connections_bounds_the_pool(serve: Serve) -> None:
    peak = active = 0

    async def handler(request: Request) -> Response:
        nonlocal peak, active
        active += 1
        peak = max(peak, active)
        await asyncio.sleep(0.02)
        active -= 1
        return Response.text("x")

    server = await serve(handler)
    other = await serve(echo)
    async with HttpClient(max_connections=2) as client:

        async def one(url: str) -> bytes:
            return await (await client.request("GET", url)).read()

        assert await asyncio.gather(*(one(server.url) for _ in range(6))) == [b"x"] * 6
        assert peak == 2
        await one(other.url)  # an idle connection is evicted to make room
        assert len(client._open) <= 2


async def test_aclose_breaks_an_in_flight_response(serve: Serve) -> None:
    sent = asyncio.Event()

    async def parts() -> AsyncIterator[bytes]:
        yield b"a"
        sent.set()
        await asyncio.sleep(10)  # a stalled upstream, the scenario
        yield b"b"

    async def handler(request: Request) -> Response:
        return Response(body=parts())

    server = await serve(handler)
    client = HttpClient()
    resp = await client.request("GET", server.url)
    reading = asyncio.create_task(resp.read())
    await sent.wait()
    await client.aclose()
    with pytest.raises(HttpReadError):
        await reading
    with pytest.raises(HttpConnectError, match="closed"):
        await client.request("GET", server.url)


async def test_cancelled_request_closes_its_connection(serve: Serve, client: HttpClient) -> None:
    async def slow(request: Request) -> Response:
        await asyncio.sleep(0.05 if request.path == "/slow" else 0)
        return Response.json(request.client)

    server = await serve(slow)
    first = await (await client.request("GET", server.url)).read()
    with pytest.raises(TimeoutError):
        async with asyncio.timeout(0.01):
            await client.request("GET", server.url + "/slow")
    second = await (await client.request("GET", server.url)).read()
    assert first != second  # the cancelled exchange's connection was not reused


async def test_pooled_connection_closed_by_server_aclose(serve: Serve, client: HttpClient) -> None:
    server = await serve(echo)
    await (await client.request("GET", server.url)).read()
    await server.aclose()
    await until(lambda: not client._open, "the client saw its idle connection close")
    with pytest.raises(HttpConnectError):
        await client.request("GET", server.url)
