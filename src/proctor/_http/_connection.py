"""One HTTP/1.1 server connection: read a request (head, then body), dispatch it in a
task, write the responses in order, and enforce the server's limits on it.

Bytes that arrive while a handler runs (a pipelined request) wait in the buffer, so
responses go out in order. Losing the connection cancels the handler's task, which
also closes a streaming body.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import math
import socket
from collections.abc import AsyncIterable, AsyncIterator
from typing import Protocol, cast

from .._errors import Abort
from .._reads import BufferedReads
from ._limits import HttpLimits
from ._message import Handler, Request, Response, Screen, Share, error_response
from ._parse import (
    ChunkedDecoder,
    LengthReader,
    ParseError,
    Reader,
    RequestHead,
    encode_chunk,
    parse_request_head,
    response_head,
    split_framing,
)

__all__ = ["Connection", "ConnectionHost"]

log = logging.getLogger("proctor.http")

_LINGER = 2.0  # seconds a refused connection keeps draining input so the error is read
_BODYLESS = frozenset((204, 304))
_CONTINUE = b"HTTP/1.1 100 Continue\r\n\r\n"
_LAST_CHUNK = b"0\r\n\r\n"
_IDLE, _HEAD, _BODY, _BUSY = range(4)  # what a connection waits for


class ConnectionHost(Protocol):
    """What a connection answers to (`HttpServer`): the handler and the server-wide
    bounds, the count of buffered bytes, and the connection cap's bookkeeping."""

    handler: Handler
    screen: Screen | None
    limits: HttpLimits
    max_head: int
    max_body: int
    buffered: int  # request bytes held over all connections
    closing: bool

    def admit(self, conn: Connection) -> bool:
        """Take a new connection in; False when it is over the cap (to be refused)."""
        ...

    def quiet(self, conn: Connection) -> None:
        """`conn` has no request in hand: it may be closed to make room at the cap."""
        ...

    def busy(self, conn: Connection) -> None:
        """`conn` reads or answers a request (or closes): no longer quiet."""
        ...

    def release(self) -> None:
        """An admitted connection closes: its place under the cap is free."""
        ...

    def forget(self, conn: Connection) -> None:
        """`conn` is gone."""
        ...


class Connection(BufferedReads):
    """One client connection: parse, dispatch, write responses in order."""

    def __init__(self, server: ConnectionHost) -> None:
        self._server = server
        self._transport: asyncio.Transport | None = None
        self._loop = asyncio.get_running_loop()
        self._client: tuple[str, int] | None = None
        self._buf = b""
        self._head: RequestHead | None = None
        self._screened_request: Request | None = None  # the one the screen saw, if any
        self._reader: Reader | None = None
        self._parts: list[bytes] = []
        self._size = 0
        self._task: asyncio.Task[None] | None = None
        self._lost = False
        self._refused = False  # an error response went out; input is drained, not parsed
        self._counted = False  # against the server's connection cap
        self._read_paused = False
        self._write_paused = False
        self._drain: asyncio.Future[None] | None = None
        self._linger: asyncio.TimerHandle | None = None
        self._reserved = 0  # body bytes of the request in hand (a Content-Length in full)
        self._held = 0  # this connection's share of `server.buffered`
        self._share: Share | None = None  # the owner the request in hand is charged to
        self._charged = 0  # body bytes charged to `_share`
        self._waiting = _IDLE
        self.deadline = math.inf  # loop time by which the awaited bytes must be in

    # -- asyncio.Protocol ------------------------------------------------------

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self._transport = cast(asyncio.Transport, transport)
        server = self._server
        if not server.admit(self):
            self._refuse(503, "too many connections; retry later")
            return
        self._counted = True
        self._wait_for(_IDLE)
        sock = transport.get_extra_info("socket")
        if sock is not None:
            with contextlib.suppress(OSError):  # not TCP (a Unix socket): nothing to tune
                sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        peer = transport.get_extra_info("peername")
        if isinstance(peer, tuple) and len(peer) >= 2:
            self._client = (peer[0], peer[1])

    def connection_lost(self, exc: Exception | None) -> None:
        self._lost = True
        self._uncount()
        self._server.forget(self)
        self._buf = b""
        self._parts = []
        self._reserved = 0
        self._unshare()
        self._account()
        if self._task is not None:
            self._task.cancel()
        if self._linger is not None:
            self._linger.cancel()
        self._wake()

    def data_received(self, data: bytes) -> None:
        if self._refused:
            return
        if self._reader is not None:
            self._feed_body(data)
        elif self._task is None:
            if not self._buf:
                self._wait_for(_HEAD)
            self._buf = self._buf + data if self._buf else data
            self._next_request()
        else:
            self._buf = self._buf + data if self._buf else data
            if len(self._buf) > self._server.max_head and not self._read_paused:
                # A client pipelining faster than we answer: stop reading until we catch up.
                self._read_paused = True
                self._transport_().pause_reading()
        if not self._refused:
            self._account()

    def eof_received(self) -> bool | None:
        return None  # a half-close counts as a disconnect: close, cancelling the handler

    def pause_writing(self) -> None:
        self._write_paused = True

    def resume_writing(self) -> None:
        self._write_paused = False
        self._wake()

    # -- limits ------------------------------------------------------------------

    def _wait_for(self, what: int) -> None:
        """Enter a waiting state; its deadline starts now."""
        self._waiting = what
        limits = self._server.limits
        if what == _BUSY:
            self.deadline = math.inf
        else:
            timeout = (limits.idle_timeout, limits.head_timeout, limits.body_timeout)[what]
            self.deadline = self._loop.time() + timeout

    def expire(self) -> None:
        """The deadline passed: close an idle connection quietly; 408 a slow request."""
        self.deadline = math.inf
        if self._refused or self._lost:
            return
        if self._waiting == _IDLE:
            self.evict()
        elif self._waiting == _HEAD:
            self._refuse(408, "the request head took too long")
        elif self._waiting == _BODY:
            self._refuse(408, "the request body took too long")

    def evict(self) -> None:
        """Close a connection that has no request in hand (to make room, or idle): a
        clean close between requests, a reset mid-head."""
        self._uncount()
        if self._buf:
            self._transport_().abort()
        else:
            self._transport_().close()

    def _uncount(self) -> None:
        server = self._server
        server.busy(self)
        if self._counted:
            self._counted = False
            server.release()

    def _account(self) -> bool:
        """Bring `server.buffered` up to date; refuse with 503 (True) past its cap."""
        held = len(self._buf) + self._reserved
        delta = held - self._held
        if not delta:
            return False
        server = self._server
        server.buffered += delta
        self._held = held
        if delta > 0 and server.buffered > server.limits.max_buffered and self._task is None:
            # (while a response is going out, reading is paused past `max_head` instead)
            self._refuse(503, "the server holds too many request bytes; retry later")
            return True
        return False

    # -- reading ---------------------------------------------------------------

    def _transport_(self) -> asyncio.Transport:
        assert self._transport is not None
        return self._transport

    def _next_request(self) -> None:
        buf = self._buf
        if buf[:1] in (b"\r", b"\n"):
            buf = buf.lstrip(b"\r\n")  # RFC 9112 2.2: ignore blank lines before a request
        end = buf.find(b"\r\n\r\n")
        max_head = self._server.max_head
        if end < 0 or end > max_head:
            self._buf = buf
            if len(buf) > max_head:
                self._refuse(431, "request head too large")
            return
        try:
            head = parse_request_head(buf[:end])
        except ParseError as exc:
            self._refuse(exc.status, str(exc))
            return
        rest = buf[end + 4 :]
        self._buf = b""
        server = self._server
        server.busy(self)
        share = None
        self._screened_request = None
        if server.screen is not None:
            request = Request(head.method, head.target, head.headers, b"", self._client)
            self._screened_request = request  # dispatched with its body, once that is in
            try:
                verdict = server.screen(request)
            except Exception as exc:
                log.exception("the screen failed on %s %s", head.method, head.target)
                verdict = error_response(500, f"{type(exc).__name__}: {exc}")
            if isinstance(verdict, Share):
                share = verdict
            elif verdict is not None:
                self._screened(verdict, head, rest)
                return
        if head.length is not None and head.length > server.max_body:
            self._refuse(413, "request body too large")
            return
        if share is None:
            self._reserved = head.length or 0  # held in full from the head
            if self._account():
                return
        else:  # charged to its owner's share; to the server's only as bytes arrive
            problem = share.take(head.length or 0)
            if problem is not None:
                self._refuse_share(share, *problem, head)
                return
            self._share, self._charged = share, head.length or 0
        self._head = head
        self._parts = []
        self._size = 0
        self._reader = ChunkedDecoder() if head.chunked else LengthReader(head.length or 0)
        self._wait_for(_BODY)
        self._feed_body(rest)
        expect = head.headers.get("expect")
        if self._reader is not None and expect and expect.lower() == "100-continue":
            self._transport_().write(_CONTINUE)

    def _screened(self, response: Response, head: RequestHead, rest: bytes) -> None:
        """Send the screen's refusal. The body is never read: the connection closes after
        the reply, unless the request had no body and nothing follows it (a client that
        pipelines refused requests, or does not read its refusals, is not kept)."""
        body = cast(bytes, response.body)
        if head.chunked or head.length or rest:
            self._refuse_with(response, body, head)
            return
        if self._write_whole(response, body, not head.keep_alive, head) and not (
            self._write_paused or self._server.closing
        ):
            self._server.quiet(self)
            self._wait_for(_IDLE)
        else:
            self._transport_().close()

    def _feed_body(self, data: bytes) -> None:
        reader = self._reader
        assert reader is not None
        try:
            parts = reader.feed(data)
        except ParseError as exc:
            self._refuse(400, str(exc))
            return
        if parts:
            self._size += sum(map(len, parts))
            if self._size > self._server.max_body:
                self._refuse(413, "request body too large")
                return
            self._parts.extend(parts)
            share = self._share
            if share is not None and self._size > self._charged:  # chunked: charged as it comes
                grown = share.grow(self._size - self._charged)
                self._charged = self._size
                if not grown:
                    message = "this client's requests hold its share of bytes"
                    self._refuse_share(share, 429, message, self._head)
                    return
            if self._size > self._reserved:  # held as it comes (a share's, or chunked)
                self._reserved = self._size
                if self._account():
                    return
        if reader.done:
            self._reader = None
            self._buf = reader.tail
            self._dispatch()

    def _dispatch(self) -> None:
        head = self._head
        assert head is not None
        parts = self._parts
        self._parts = []
        body = parts[0] if len(parts) == 1 else b"".join(parts)
        request, self._screened_request = self._screened_request, None
        if request is None:
            request = Request(head.method, head.target, head.headers, body, self._client)
        else:
            request.body = body
        request.share = self._share
        self._wait_for(_BUSY)
        self._task = self._loop.create_task(self._respond(request, head))

    def _refuse(self, status: int, message: str) -> None:
        """Answer an error, then drain input for a while so the client reads it."""
        error = error_response(status, message)
        self._refuse_with(error, cast(bytes, error.body), None)

    def _refuse_share(
        self, share: Share, status: int, message: str, head: RequestHead | None
    ) -> None:
        """Refuse a request over its owner's share, in the owner's words if it has any."""
        if share.refusal is None:
            self._refuse(status, message)
            return
        response = share.refusal(status, message)
        self._refuse_with(response, cast(bytes, response.body), head)

    def _unshare(self) -> None:
        """Give the request in hand back to its owner's share."""
        share, self._share = self._share, None
        if share is not None:
            share.give_back(self._charged)
            self._charged = 0

    def _refuse_with(self, response: Response, body: bytes, head: RequestHead | None) -> None:
        """Send `response` and close, draining (never buffering) input meanwhile."""
        self._refused = True
        self._uncount()
        self.deadline = math.inf
        self._reader = None
        self._buf = b""
        self._parts = []
        self._reserved = 0
        self._unshare()
        self._account()
        transport = self._transport_()
        fields, _, _ = split_framing(response.headers, True)
        transport.write(response_head(response.status, fields, True, len(body), False, head) + body)
        if self._read_paused:
            transport.resume_reading()
        if transport.can_write_eof():
            transport.write_eof()
            self._linger = self._loop.call_later(_LINGER, transport.close)
        else:
            transport.close()

    # -- responding ------------------------------------------------------------

    async def _respond(self, request: Request, head: RequestHead) -> None:
        try:
            keep_alive = await self._answer(request, head)
            if self._write_paused:
                await self._drained()
        except Abort:
            self._transport_().abort()
            return
        except Exception:  # the response itself was bad (say, a CR in a header value)
            log.exception("cannot send the response to %s %s", request.method, request.target)
            self._transport_().abort()
            return
        finally:
            self._task = None
            self._unshare()
        self._reserved = 0  # the request's body is let go
        if not keep_alive or self._server.closing:
            self._account()
            self._transport_().close()
            return
        if self._read_paused:
            self._read_paused = False
            self._transport_().resume_reading()
        self._next()

    def _next(self) -> None:
        """Between requests: wait for the next one, or parse a pipelined one."""
        if self._refused or self._lost:
            return
        self._server.quiet(self)
        if self._buf:
            self._wait_for(_HEAD)
            self._next_request()
        else:
            self._wait_for(_IDLE)
        if not self._refused:
            self._account()

    async def _answer(self, request: Request, head: RequestHead) -> bool:
        """Run the handler and write its response; whether the connection stays open."""
        try:
            response = await self._server.handler(request)
        except Abort:
            raise
        except Exception as exc:
            log.exception("handler failed on %s %s", request.method, request.target)
            response = error_response(500, f"{type(exc).__name__}: {exc}")
        close = not head.keep_alive or self._server.closing
        body = response.body
        if isinstance(body, bytes | bytearray | memoryview):
            return self._write_whole(response, bytes(body), close, head)
        return await self._stream(response, body, close, head)

    def _write_whole(self, response: Response, body: bytes, close: bool, head: RequestHead) -> bool:
        """Write a response with a bytes body in one go; whether to keep the connection."""
        fields, close, _ = split_framing(response.headers, close)
        status = response.status
        bodyless = status < 200 or status in _BODYLESS
        data = response_head(status, fields, close, None if bodyless else len(body), False, head)
        if body and not bodyless and head.method != "HEAD":
            data += body
        self._transport_().write(data)
        return not close

    async def _stream(
        self, response: Response, body: AsyncIterable[bytes], close: bool, head: RequestHead
    ) -> bool:
        it = aiter(body)
        try:
            fields, close, length = split_framing(response.headers, close)
            if head.method == "HEAD" or response.status in _BODYLESS:
                data = response_head(response.status, fields, close, length, False, head)
                self._transport_().write(data)
                return not close
            chunked = length is None and head.version == "HTTP/1.1"
            close = close or (length is None and not chunked)
            try:
                first = await anext(it)
            except StopAsyncIteration:
                first = b""
            except Abort:
                raise
            except Exception as exc:  # nothing sent yet: still time for a clean 500
                log.exception("streaming body failed on %s %s", head.method, head.target)
                error = error_response(500, f"{type(exc).__name__}: {exc}")
                return self._write_whole(error, cast(bytes, error.body), close, head)
            data = response_head(response.status, fields, close, length, chunked, head)
            sent = await self._pump(it, first, data, chunked)
            if length is not None and sent != length:
                log.error("streamed body sent %d bytes, content-length said %d", sent, length)
                self._transport_().abort()
                return False
            return not close
        except (Abort, asyncio.CancelledError):
            raise
        except Exception:
            log.exception("streaming body failed on %s %s", head.method, head.target)
            self._transport_().abort()
            return False
        finally:
            aclose = getattr(it, "aclose", None)
            if aclose is not None:
                await aclose()

    async def _pump(
        self, it: AsyncIterator[bytes], first: bytes, data: bytes, chunked: bool
    ) -> int:
        """Write the head and every chunk; returns the body bytes sent."""
        transport = self._transport_()
        sent = len(first)
        if first:
            data += encode_chunk(first) if chunked else first
        transport.write(data)
        async for chunk in it:
            if not chunk:
                continue
            sent += len(chunk)
            transport.write(encode_chunk(chunk) if chunked else chunk)
            if self._write_paused:
                await self._drained()
        if chunked:
            transport.write(_LAST_CHUNK)
        return sent

    async def _drained(self) -> None:
        while self._write_paused and not self._lost:
            self._drain = asyncio.get_running_loop().create_future()
            await self._drain

    def _wake(self) -> None:
        if self._drain is not None and not self._drain.done():
            self._drain.set_result(None)

    # -- shutdown --------------------------------------------------------------

    def shutdown(self) -> asyncio.Task[None] | None:
        """Close now if idle; otherwise return the request task to wait for."""
        if self._task is None:
            self._transport_().close()
        return self._task

    def abort(self) -> None:
        """Reset the connection."""
        self._transport_().abort()
