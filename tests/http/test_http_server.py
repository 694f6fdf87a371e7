"""HttpServer on loopback, driven by raw sockets: framing, errors, streaming, shutdown."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import AsyncIterator

import orjson
import pytest
from http_helpers import TIMEOUT, Dial, Serve

from proctor._http import Abort, HttpLimits, HttpServer, Request, Response


async def echo(request: Request) -> Response:
    return Response.json(
        {
            "method": request.method,
            "path": request.path,
            "query": request.query,
            "body": request.body.decode("latin-1"),
            "headers": request.headers.items(),
        }
    )


async def test_get_and_keep_alive(serve: Serve, dial: Dial) -> None:
    server = await serve(echo)
    raw = await dial(server)
    for n in range(3):
        await raw.send(f"GET /a/{n}?x=1 HTTP/1.1\r\nHost: h\r\nX-Y: z \r\n\r\n".encode())
        status, headers, body = await raw.response()
        assert status == 200
        assert headers["content-type"] == "application/json"
        got = orjson.loads(body)
        assert (got["path"], got["query"], got["body"]) == (f"/a/{n}", "x=1", "")
        assert got["headers"] == [["Host", "h"], ["X-Y", "z"]]
    await raw.close()


async def closing_while(server: HttpServer, release: asyncio.Event) -> asyncio.Task[None]:
    """Start `server.aclose()`, and once it is closing, let the held handler answer."""
    closing = asyncio.create_task(server.aclose())
    await asyncio.sleep(0)  # aclose runs up to its wait for the in-flight request
    assert server.closing
    release.set()
    return closing


async def test_content_length_body(serve: Serve, dial: Dial) -> None:
    server = await serve(echo)
    raw = await dial(server)
    await raw.send(b"POST /p HTTP/1.1\r\nContent-Length: 5\r\n\r\nhel")
    await asyncio.sleep(0.01)
    await raw.send(b"lo")
    status, _, body = await raw.response()
    assert status == 200
    assert orjson.loads(body)["body"] == "hello"


async def test_chunked_body_with_extensions_and_trailers(serve: Serve, dial: Dial) -> None:
    server = await serve(echo)
    raw = await dial(server)
    await raw.send(
        b"POST / HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\n"
        b"3;ext=1\r\nabc\r\nA\r\n0123456789\r\n0\r\nX-Trailer: t\r\n\r\n"
        b"GET /next HTTP/1.1\r\n\r\n"
    )
    assert orjson.loads((await raw.response())[2])["body"] == "abc0123456789"
    assert orjson.loads((await raw.response())[2])["path"] == "/next"


async def test_pipelined_requests_are_answered_in_order(serve: Serve, dial: Dial) -> None:
    async def slow_first(request: Request) -> Response:
        await asyncio.sleep(0.05 if request.path == "/0" else 0)
        return Response.text(request.path)

    server = await serve(slow_first)
    raw = await dial(server)
    await raw.send(b"".join(f"GET /{n} HTTP/1.1\r\n\r\n".encode() for n in range(5)))
    assert [(await raw.response())[2] for _ in range(5)] == [f"/{n}".encode() for n in range(5)]


async def test_a_flood_of_pipelined_requests_is_served(serve: Serve, dial: Dial) -> None:
    server = await serve(echo, limits=HttpLimits(max_head=1024))
    raw = await dial(server)
    await raw.send(b"GET / HTTP/1.1\r\nX-Pad: " + b"p" * 500 + b"\r\n\r\n" * 1)
    many = b"".join(f"GET /{n} HTTP/1.1\r\n\r\n".encode() for n in range(1, 400))
    await raw.send(many)
    for n in range(400):
        assert orjson.loads((await raw.response())[2])["path"] == f"/{n or ''}"


async def test_http10_closes_unless_keep_alive(serve: Serve, dial: Dial) -> None:
    server = await serve(echo)
    raw = await dial(server)
    await raw.send(b"GET / HTTP/1.0\r\nConnection: keep-alive\r\n\r\n")
    status, headers, _ = await raw.response()
    assert (status, headers["connection"]) == (200, "keep-alive")
    await raw.send(b"GET / HTTP/1.0\r\n\r\n")
    status, headers, _ = await raw.response()
    assert (status, headers["connection"]) == (200, "close")
    assert await raw.at_eof()


async def test_connection_close(serve: Serve, dial: Dial) -> None:
    server = await serve(echo)
    raw = await dial(server)
    await raw.send(b"GET / HTTP/1.1\r\nConnection: close\r\n\r\nGET /ignored HTTP/1.1\r\n\r\n")
    status, headers, _ = await raw.response()
    assert (status, headers["connection"]) == (200, "close")
    assert await raw.at_eof()


async def test_handler_asks_to_close(serve: Serve, dial: Dial) -> None:
    async def closing(request: Request) -> Response:
        return Response(200, {"Connection": "close"}, b"bye")

    server = await serve(closing)
    raw = await dial(server)
    await raw.send(b"GET / HTTP/1.1\r\n\r\n")
    assert (await raw.response())[2] == b"bye"
    assert await raw.at_eof()


@pytest.mark.parametrize(
    ("request_bytes", "status"),
    [
        (b"GET /\r\n\r\n", 400),
        (b"GET  / HTTP/1.1\r\n\r\n", 400),
        (b"G(T / HTTP/1.1\r\n\r\n", 400),
        (b"GET / HTTP/2.0\r\n\r\n", 505),
        (b"GET / FTP/1.1\r\n\r\n", 400),
        (b"GET / HTTP/1.1\r\nBad Name: x\r\n\r\n", 400),
        (b"GET / HTTP/1.1\r\nNoColon\r\n\r\n", 400),
        (b"GET / HTTP/1.1\r\nA: b\r\n folded\r\n\r\n", 400),
        (b"GET / HTTP/1.1\r\nA: b\nC: d\r\n\r\n", 400),
        (b"GET / HTTP/1.1\r\nA: b\rc\r\n\r\n", 400),
        (b"GET / HTTP/1.1\r\nA: \x00\r\n\r\n", 400),
        (b"POST / HTTP/1.1\r\nContent-Length: -1\r\n\r\n", 400),
        (b"POST / HTTP/1.1\r\nContent-Length: 1\r\nContent-Length: 2\r\n\r\nab", 400),
        (b"POST / HTTP/1.1\r\nContent-Length: 3\r\nTransfer-Encoding: chunked\r\n\r\n", 400),
        (b"POST / HTTP/1.1\r\nTransfer-Encoding: gzip\r\n\r\n", 400),
        (b"POST / HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\nzz\r\n", 400),
        (b"POST / HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\n0x1\r\na\r\n0\r\n\r\n", 400),
        (b"POST / HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\n1\r\nab\r\n0\r\n\r\n", 400),
        (b"POST / HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\n0\r\nbad trailer\r\n\r\n", 400),
    ],
)
async def test_malformed_requests_get_400_and_close(
    serve: Serve, dial: Dial, request_bytes: bytes, status: int
) -> None:
    server = await serve(echo)
    raw = await dial(server)
    await raw.send(request_bytes)
    got, headers, body = await raw.response()
    assert (got, headers["connection"]) == (status, "close")
    assert orjson.loads(body)["error"]["code"] == status
    assert await raw.at_eof()


async def test_oversize_head_is_431(serve: Serve, dial: Dial) -> None:
    server = await serve(echo, limits=HttpLimits(max_head=1024))
    raw = await dial(server)
    await raw.send(b"GET / HTTP/1.1\r\nX-Big: " + b"x" * 2000)
    assert (await raw.response())[0] == 431
    assert await raw.at_eof()


async def test_oversize_complete_head_is_431(serve: Serve, dial: Dial) -> None:
    server = await serve(echo, limits=HttpLimits(max_head=1024))
    raw = await dial(server)
    await raw.send(b"GET / HTTP/1.1\r\nX-Big: " + b"x" * 2000 + b"\r\n\r\n")
    assert (await raw.response())[0] == 431


async def test_body_over_max_body_is_413_before_reading_it(serve: Serve, dial: Dial) -> None:
    server = await serve(echo, limits=HttpLimits(max_body=100))
    raw = await dial(server)
    await raw.send(b"POST / HTTP/1.1\r\nContent-Length: 101\r\n\r\n")
    assert (await raw.response())[0] == 413
    assert await raw.at_eof()


async def test_chunked_body_over_max_body_is_413(serve: Serve, dial: Dial) -> None:
    server = await serve(echo, limits=HttpLimits(max_body=100))
    raw = await dial(server)
    await raw.send(b"POST / HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\n")
    await raw.send(b"40\r\n" + b"a" * 64 + b"\r\n" + b"40\r\n" + b"a" * 64 + b"\r\n")
    assert (await raw.response())[0] == 413


async def test_refused_client_still_reads_the_error_while_sending(serve: Serve, dial: Dial) -> None:
    server = await serve(echo, limits=HttpLimits(max_body=1000))
    raw = await dial(server)
    await raw.send(b"POST / HTTP/1.1\r\nContent-Length: 10000000\r\n\r\n")
    raw.writer.write(b"x" * 200_000)  # keeps sending as a naive client would
    assert (await raw.response())[0] == 413


async def test_expect_100_continue(serve: Serve, dial: Dial) -> None:
    server = await serve(echo)
    raw = await dial(server)
    await raw.send(b"POST / HTTP/1.1\r\nContent-Length: 4\r\nExpect: 100-continue\r\n\r\n")
    assert (await raw.head())[0] == 100
    await raw.send(b"body")
    status, _, body = await raw.response()
    assert (status, orjson.loads(body)["body"]) == (200, "body")


async def test_expect_100_continue_refused_when_too_big(serve: Serve, dial: Dial) -> None:
    server = await serve(echo, limits=HttpLimits(max_body=3))
    raw = await dial(server)
    await raw.send(b"POST / HTTP/1.1\r\nContent-Length: 4\r\nExpect: 100-continue\r\n\r\n")
    assert (await raw.head())[0] == 413


async def test_handler_exception_is_a_logged_500(
    serve: Serve, dial: Dial, caplog: pytest.LogCaptureFixture
) -> None:
    async def broken(request: Request) -> Response:
        raise KeyError("nope")

    server = await serve(broken)
    raw = await dial(server)
    await raw.send(b"GET / HTTP/1.1\r\n\r\nGET / HTTP/1.1\r\n\r\n")
    for _ in range(2):  # the connection survives
        status, _, body = await raw.response()
        assert status == 500
        assert orjson.loads(body) == {"error": {"code": 500, "message": "KeyError: 'nope'"}}
    assert [r.levelno for r in caplog.records] == [logging.ERROR, logging.ERROR]


async def test_head_request_gets_length_without_body(serve: Serve, dial: Dial) -> None:
    server = await serve(echo)
    raw = await dial(server)
    await raw.send(b"HEAD / HTTP/1.1\r\n\r\nGET /after HTTP/1.1\r\n\r\n")
    status, headers, _ = await raw.response("HEAD")
    assert status == 200
    assert int(headers["content-length"]) > 0
    assert orjson.loads((await raw.response())[2])["path"] == "/after"


async def test_no_content_has_no_length(serve: Serve, dial: Dial) -> None:
    async def empty(request: Request) -> Response:
        return Response(204)

    server = await serve(empty)
    raw = await dial(server)
    await raw.send(b"DELETE / HTTP/1.1\r\n\r\n")
    status, headers, _ = await raw.response()
    assert status == 204
    assert "content-length" not in headers


async def test_streaming_body_chunks_are_flushed_as_they_come(serve: Serve, dial: Dial) -> None:
    step = asyncio.Event()

    async def events() -> AsyncIterator[bytes]:
        yield b"one"
        await step.wait()
        yield b""  # skipped: an empty chunk would end the body
        yield b"two"

    async def handler(request: Request) -> Response:
        return Response(200, [("content-type", "text/event-stream")], events())

    server = await serve(handler)
    raw = await dial(server)
    await raw.send(b"GET / HTTP/1.1\r\n\r\n")
    status, headers = await raw.head()
    assert (status, headers["transfer-encoding"]) == (200, "chunked")
    assert await raw.reader.readexactly(8) == b"3\r\none\r\n"
    step.set()
    assert await raw.reader.readexactly(13) == b"3\r\ntwo\r\n0\r\n\r\n"


async def test_streaming_with_content_length_is_raw(serve: Serve, dial: Dial) -> None:
    async def parts() -> AsyncIterator[bytes]:
        yield b"ab"
        yield b"cd"

    async def handler(request: Request) -> Response:
        return Response(200, {"Content-Length": "4"}, parts())

    server = await serve(handler)
    raw = await dial(server)
    await raw.send(b"GET / HTTP/1.1\r\n\r\nGET / HTTP/1.1\r\n\r\n")
    for _ in range(2):
        status, headers, body = await raw.response()
        assert (status, headers["content-length"], body) == (200, "4", b"abcd")
        assert "transfer-encoding" not in headers


async def test_streaming_to_http10_is_raw_then_close(serve: Serve, dial: Dial) -> None:
    async def parts() -> AsyncIterator[bytes]:
        yield b"ab"
        yield b"cd"

    async def handler(request: Request) -> Response:
        return Response(body=parts())

    server = await serve(handler)
    raw = await dial(server)
    await raw.send(b"GET / HTTP/1.0\r\nConnection: keep-alive\r\n\r\n")
    status, headers, body = await raw.response()
    assert (status, headers["connection"], body) == (200, "close", b"abcd")


async def test_streaming_body_failing_at_once_is_a_500(
    serve: Serve, dial: Dial, caplog: pytest.LogCaptureFixture
) -> None:
    async def parts() -> AsyncIterator[bytes]:
        raise ValueError("no data")
        yield b""

    async def handler(request: Request) -> Response:
        return Response(body=parts())

    server = await serve(handler)
    raw = await dial(server)
    await raw.send(b"GET / HTTP/1.1\r\n\r\n")
    assert (await raw.response())[0] == 500
    assert len(caplog.records) == 1


async def test_streaming_body_failing_midway_resets(
    serve: Serve, dial: Dial, caplog: pytest.LogCaptureFixture
) -> None:
    async def parts() -> AsyncIterator[bytes]:
        yield b"partial"
        raise ValueError("broke")

    async def handler(request: Request) -> Response:
        return Response(body=parts())

    server = await serve(handler)
    raw = await dial(server)
    await raw.send(b"GET / HTTP/1.1\r\n\r\n")
    await raw.head()
    assert await raw.reader.readexactly(12) == b"7\r\npartial\r\n"
    assert await raw.at_eof()
    assert len(caplog.records) == 1


async def test_abort_in_handler_resets_without_response(serve: Serve, dial: Dial) -> None:
    async def abort(request: Request) -> Response:
        raise Abort

    server = await serve(abort)
    raw = await dial(server)
    await raw.send(b"GET / HTTP/1.1\r\n\r\n")
    assert await raw.at_eof()


async def test_abort_mid_stream_cuts_the_body(serve: Serve, dial: Dial) -> None:
    async def parts() -> AsyncIterator[bytes]:
        yield b"first"
        raise Abort

    async def handler(request: Request) -> Response:
        return Response(body=parts())

    server = await serve(handler)
    raw = await dial(server)
    await raw.send(b"GET / HTTP/1.1\r\n\r\n")
    await raw.head()
    assert await raw.reader.readexactly(10) == b"5\r\nfirst\r\n"
    assert await raw.at_eof()


async def test_client_disconnect_cancels_the_handler(serve: Serve, dial: Dial) -> None:
    started, cancelled = asyncio.Event(), asyncio.Event()

    async def forever(request: Request) -> Response:
        started.set()
        try:
            await asyncio.Event().wait()
        except asyncio.CancelledError:
            cancelled.set()
            raise
        return Response()

    server = await serve(forever)
    raw = await dial(server)
    await raw.send(b"GET / HTTP/1.1\r\n\r\n")
    await asyncio.wait_for(started.wait(), TIMEOUT)
    await raw.close()
    await asyncio.wait_for(cancelled.wait(), TIMEOUT)


async def test_client_disconnect_closes_a_streaming_generator(serve: Serve, dial: Dial) -> None:
    closed = asyncio.Event()

    async def ticks() -> AsyncIterator[bytes]:
        try:
            while True:
                yield b"tick"
                await asyncio.sleep(0.005)
        finally:
            closed.set()

    async def handler(request: Request) -> Response:
        return Response(body=ticks())

    server = await serve(handler)
    raw = await dial(server)
    await raw.send(b"GET / HTTP/1.1\r\n\r\n")
    await raw.head()
    await raw.reader.readexactly(9)
    await raw.close()
    await asyncio.wait_for(closed.wait(), TIMEOUT)


async def test_a_slow_reader_gets_every_byte(serve: Serve, dial: Dial) -> None:
    block = b"z" * 65536

    async def big() -> AsyncIterator[bytes]:
        for _ in range(64):
            yield block

    async def handler(request: Request) -> Response:
        return Response(body=big())

    server = await serve(handler)
    raw = await dial(server)
    await raw.send(b"GET / HTTP/1.1\r\n\r\n")
    await asyncio.sleep(0.2)  # let the server fill the socket and pause writing
    assert (await raw.response())[2] == block * 64


async def test_a_bad_response_header_resets(
    serve: Serve, dial: Dial, caplog: pytest.LogCaptureFixture
) -> None:
    async def injected(request: Request) -> Response:
        return Response(200, {"X-A": "b\r\nX-Evil: 1"})

    server = await serve(injected)
    raw = await dial(server)
    await raw.send(b"GET / HTTP/1.1\r\n\r\n")
    assert await raw.at_eof()
    assert "cannot send the response" in caplog.text


async def test_aclose_closes_idle_keep_alive_connections(serve: Serve, dial: Dial) -> None:
    server = await serve(echo)
    raws = [await dial(server) for _ in range(3)]
    for raw in raws:
        await raw.send(b"GET / HTTP/1.1\r\n\r\n")
        await raw.response()
    await asyncio.wait_for(server.aclose(), TIMEOUT)
    for raw in raws:
        assert await raw.at_eof()


async def test_aclose_lets_an_in_flight_request_finish(serve: Serve, dial: Dial) -> None:
    started, release = asyncio.Event(), asyncio.Event()

    async def slow(request: Request) -> Response:
        started.set()
        await release.wait()
        return Response.text("done")

    server = await serve(slow)
    raw = await dial(server)
    await raw.send(b"GET / HTTP/1.1\r\n\r\n")
    await started.wait()
    closing = await closing_while(server, release)
    status, headers, body = await raw.response()
    assert (status, headers["connection"], body) == (200, "close", b"done")
    await closing


async def test_aclose_cancels_requests_past_the_grace(serve: Serve, dial: Dial) -> None:
    started, cancelled = asyncio.Event(), asyncio.Event()

    async def stuck(request: Request) -> Response:
        started.set()
        try:
            await asyncio.Event().wait()
        except asyncio.CancelledError:
            cancelled.set()
            raise
        return Response()

    server = await serve(stuck)
    raw = await dial(server)
    await raw.send(b"GET / HTTP/1.1\r\n\r\n")
    await started.wait()
    await asyncio.wait_for(server.aclose(grace=0.05), TIMEOUT)
    assert cancelled.is_set()
    assert await raw.at_eof()


async def test_url_and_context_manager() -> None:
    from proctor._http import HttpServer

    async with HttpServer(echo) as server:
        assert server.port > 0
        assert server.url == f"http://127.0.0.1:{server.port}"


async def test_aclose_flushes_a_large_last_response(serve: Serve, dial: Dial) -> None:
    started, release = asyncio.Event(), asyncio.Event()
    big = b"b" * (8 * 1024 * 1024)

    async def slow(request: Request) -> Response:
        started.set()
        await release.wait()
        return Response(body=big)

    server = await serve(slow)
    raw = await dial(server)
    await raw.send(b"GET / HTTP/1.1\r\n\r\n")
    await started.wait()
    closing = await closing_while(server, release)
    # a slow reader, the scenario: the response sits in the server's buffer meanwhile
    await asyncio.sleep(0.2)
    assert (await raw.response())[2] == big
    await closing
