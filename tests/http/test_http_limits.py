"""HttpServer limits (issue 8, finding 4): read deadlines, the connection cap, the cap on
buffered request bytes, and screening a request from its head before its body."""

from __future__ import annotations

import asyncio
import contextlib
import time

import orjson
import pytest
from http_helpers import Dial, Serve

from proctor._http import HttpLimits, Request, Response


async def echo(request: Request) -> Response:
    return Response.json({"path": request.path, "size": len(request.body)})


def post(path: str, length: int, extra: str = "") -> bytes:
    return f"POST {path} HTTP/1.1\r\nContent-Length: {length}\r\n{extra}\r\n".encode()


async def test_a_trickled_body_is_cut_off_at_the_body_deadline(serve: Serve, dial: Dial) -> None:
    server = await serve(echo, limits=HttpLimits(body_timeout=0.4))
    raw = await dial(server)
    await raw.send(post("/", 100))
    t0 = time.monotonic()

    async def trickle() -> None:  # 5 B/s
        with contextlib.suppress(ConnectionError):
            for _ in range(100):
                await raw.send(b"x")
                await asyncio.sleep(0.2)

    sender = asyncio.create_task(trickle())
    try:
        status, headers, _ = await raw.response()
    finally:
        sender.cancel()
    assert status == 408 and headers["connection"] == "close"
    assert "x-should-retry" not in headers  # never handled: a retry is fine
    assert 0.4 <= time.monotonic() - t0 < 2.5
    assert server.buffered == 0


async def test_a_slow_head_gets_408_and_an_idle_connection_is_closed(
    serve: Serve, dial: Dial
) -> None:
    server = await serve(echo, limits=HttpLimits(head_timeout=0.3, idle_timeout=0.6))
    slow = await dial(server)
    await slow.send(b"GET / HTTP/1.1\r\nX-A: ")
    idle = await dial(server)
    kept = await dial(server)
    await kept.send(b"GET /1 HTTP/1.1\r\n\r\n")
    assert (await kept.response())[0] == 200
    status = (await slow.response())[0]
    assert status == 408 and await slow.at_eof()
    assert await idle.at_eof()  # closed quietly, no response
    assert await kept.at_eof()  # idle again after its response
    assert server.connections == 0


async def test_at_the_cap_the_longest_idle_connection_makes_room(serve: Serve, dial: Dial) -> None:
    server = await serve(echo, limits=HttpLimits(max_connections=3))
    raws = [await dial(server) for _ in range(3)]
    for n, raw in enumerate(raws):
        await raw.send(f"GET /{n} HTTP/1.1\r\n\r\n".encode())
        assert (await raw.response())[0] == 200
    newcomer = await dial(server)
    await newcomer.send(b"GET /new HTTP/1.1\r\n\r\n")
    assert orjson.loads((await newcomer.response())[2])["path"] == "/new"
    assert await raws[0].at_eof()  # the longest idle went
    await raws[1].send(b"GET /again HTTP/1.1\r\n\r\n")
    assert (await raws[1].response())[0] == 200
    assert server.connections == 3


async def test_at_the_cap_with_every_connection_busy_a_newcomer_gets_503(
    serve: Serve, dial: Dial
) -> None:
    release = asyncio.Event()

    async def blocked(request: Request) -> Response:
        await release.wait()
        return Response.text("done")

    server = await serve(blocked, limits=HttpLimits(max_connections=2))
    busy = [await dial(server) for _ in range(2)]
    for raw in busy:
        await raw.send(b"GET / HTTP/1.1\r\n\r\n")
    await asyncio.sleep(0.05)
    newcomer = await dial(server)
    await newcomer.send(b"GET / HTTP/1.1\r\n\r\n")
    status, headers, _ = await newcomer.response()
    assert status == 503 and headers["retry-after"] == "1" and await newcomer.at_eof()
    release.set()
    assert [(await raw.response())[2] for raw in busy] == [b"done", b"done"]


async def test_buffered_request_bytes_are_capped_over_connections(serve: Serve, dial: Dial) -> None:
    server = await serve(echo, limits=HttpLimits(max_buffered=1000, max_body=1000))
    first = await dial(server)
    await first.send(post("/a", 800) + b"x" * 100)  # 800 reserved, 100 arrived
    await asyncio.sleep(0.05)
    assert server.buffered == 800
    second = await dial(server)
    await second.send(post("/b", 300) + b"y" * 300)
    status, headers, _ = await second.response()
    assert status == 503 and headers["retry-after"] == "1" and await second.at_eof()
    chunked = await dial(server)
    await chunked.send(b"POST /c HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\n")
    await chunked.send(b"c9\r\n" + b"z" * 201 + b"\r\n")  # 201 more: over
    assert (await chunked.response())[0] == 503
    await first.send(b"x" * 700)
    assert orjson.loads((await first.response())[2]) == {"path": "/a", "size": 800}
    await asyncio.sleep(0.05)
    assert server.buffered == 0
    third = await dial(server)
    await third.send(post("/b", 300) + b"y" * 300)
    assert (await third.response())[0] == 200


async def test_a_screened_request_is_refused_before_its_body_is_read(
    serve: Serve, dial: Dial
) -> None:
    seen: list[str] = []

    def screen(request: Request) -> Response | None:
        assert request.body == b""
        if request.headers.get("authorization") == "Bearer good":
            return None
        return Response.json({"error": "who are you"}, 401)

    async def handler(request: Request) -> Response:
        seen.append(request.path)
        return Response.text("ok")

    server = await serve(handler, screen=screen)
    raw = await dial(server)
    await raw.send(post("/big", 64 * 1024 * 1024))  # the body never comes
    status, headers, _ = await raw.response()
    assert status == 401 and headers["connection"] == "close" and await raw.at_eof()
    assert server.buffered == 0

    expecting = await dial(server)  # no 100 Continue for a refused request
    await expecting.send(post("/e", 10, "Expect: 100-continue\r\n"))
    assert (await expecting.response())[0] == 401

    keep = await dial(server)  # bodyless: the connection stays usable
    for _ in range(2):
        await keep.send(b"GET /x HTTP/1.1\r\n\r\n")
        assert (await keep.response())[0] == 401
    await keep.send(b"GET /y HTTP/1.1\r\nAuthorization: Bearer good\r\n\r\n")
    assert (await keep.response())[0] == 200
    assert seen == ["/y"]


async def test_pipelined_screened_requests_close_the_connection(serve: Serve, dial: Dial) -> None:
    server = await serve(echo, screen=lambda request: Response.text("no", 403))
    raw = await dial(server)
    await raw.send(b"GET / HTTP/1.1\r\n\r\n" * 3000)
    status, headers, _ = await raw.response()
    assert status == 403 and headers["connection"] == "close" and await raw.at_eof()


def test_limits_are_validated() -> None:
    with pytest.raises(ValueError):
        HttpLimits(body_timeout=0)
    with pytest.raises(ValueError):
        HttpLimits(max_buffered=10, max_body=100)


async def test_a_screen_that_raises_is_a_logged_500(serve: Serve, dial: Dial) -> None:
    def screen(request: Request) -> Response | None:
        raise RuntimeError("boom")

    server = await serve(echo, screen=screen)
    raw = await dial(server)
    await raw.send(post("/", 5) + b"hello")
    status, headers, _ = await raw.response()
    assert status == 500 and headers["x-should-retry"] == "false" and await raw.at_eof()
