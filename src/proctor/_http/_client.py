"""A lean HTTP/1.1 client on asyncio protocols, with a keep-alive pool per origin.

`request` returns once the response head is in; the body is read lazily. A connection
goes back to the pool only when its response body was read to the end, so a connection
never carries leftovers of an earlier exchange.
"""

from __future__ import annotations

import asyncio
import collections
import contextlib
import socket
from collections.abc import AsyncIterator
from typing import TYPE_CHECKING, Any, cast

import orjson

from .._errors import HttpConnectError, HttpReadError, HttpTimeout
from .._reads import BufferedReads
from .._resource import AsyncResource
from ._headers import Headers, HeaderSource, as_pairs
from ._parse import (
    CloseReader,
    ParseError,
    Reader,
    ResponseHead,
    encode_head,
    parse_response_head,
)

if TYPE_CHECKING:
    import ssl

__all__ = ["ClientResponse", "HttpClient"]

_MAX_HEAD = 256 * 1024
_HIGH_WATER = 1024 * 1024  # unread body bytes at which the socket stops being read
_DEFAULT_PORTS = {"http": 80, "https": 443}
_FRAMING = frozenset(("content-length", "transfer-encoding"))
_WITH_BODY = frozenset(("POST", "PUT", "PATCH"))
_IDEMPOTENT = frozenset(("GET", "HEAD", "OPTIONS", "TRACE", "PUT", "DELETE"))

Origin = tuple[str, str, int]  # scheme, host, port


class HttpClient(AsyncResource):
    """An HTTP/1.1 client with a keep-alive connection pool per origin.

    Args:
        max_connections: open connections at most, over all origins; idle ones are
            closed to make room, and requests wait when every one is busy.
        connect_timeout: seconds to connect (TLS handshake included).
        read_timeout: seconds to wait for each piece of the response; None waits forever.
        ssl_context: for https; the default verifies certificates against system roots.
    """

    def __init__(
        self,
        *,
        max_connections: int = 512,
        connect_timeout: float = 10.0,
        read_timeout: float | None = 600.0,
        ssl_context: ssl.SSLContext | None = None,
    ) -> None:
        self.connect_timeout = connect_timeout
        self.read_timeout = read_timeout
        self._ssl = ssl_context
        self._max = max_connections
        self._count = 0  # connections open or opening
        self._waiters: collections.deque[tuple[Origin, asyncio.Future[_Connection | None]]] = (
            collections.deque()
        )
        self._idle: dict[Origin, list[_Connection]] = {}
        self._open: set[_Connection] = set()
        self._urls: dict[str, tuple[Origin, str]] = {}
        self._closed = False

    async def request(
        self, method: str, url: str, *, headers: HeaderSource = (), body: bytes = b""
    ) -> ClientResponse:
        """Send one request; returns when the response head has arrived.

        A pooled connection that breaks before a byte of the response came back (the
        server closed it while it sat idle, or reset it on this request) is retried once
        on a new connection, for idempotent methods only (RFC 9110 9.2.2). A POST or
        PATCH is never resent: the server may have received it, so the caller's retry
        logic decides, and counts it.

        Raises:
            ValueError: the URL is not http(s) or a header holds CR or LF.
            HttpConnectError: could not connect (refused, unresolvable, TLS failed).
            HttpReadError: the connection broke before the head, or the head is malformed.
            HttpTimeout: connecting or waiting for the head took too long.
        """
        origin, target, host = self._split(url)
        data = _encode_request(method, target, host, headers, body)
        retried = False
        while True:
            conn, reused = await self._acquire(origin)
            try:
                head = await conn.exchange(data, method)
            except HttpReadError as exc:
                conn.close()
                if reused and not conn.got_bytes:
                    if method in _IDEMPOTENT and not retried:
                        retried = True  # most likely closed while idle: a race, not an answer
                        continue
                    raise HttpReadError(
                        f"{exc} (a reused keep-alive connection, before any response byte:"
                        " the server may have received the request)"
                    ) from None
                raise
            except BaseException:
                conn.close()
                raise
            return ClientResponse(self, conn, head)

    async def aclose(self) -> None:
        """Close every connection, idle or busy; the client cannot be used afterwards."""
        self._closed = True
        self._idle.clear()
        while self._waiters:
            self._waiters.popleft()[1].set_exception(HttpConnectError("the client is closed"))
        conns = list(self._open)
        for conn in conns:
            conn.close()
        if conns:
            await asyncio.wait([conn.gone for conn in conns], timeout=1.0)

    # -- pool ------------------------------------------------------------------

    def _split(self, url: str) -> tuple[Origin, str, str]:
        """(origin, request target, Host header) of a URL, caching the origin part."""
        scheme, sep, rest = url.partition("://")
        if not sep or scheme not in _DEFAULT_PORTS:
            raise ValueError(f"not an http(s) URL: {url!r}")
        end = len(rest)
        for stop in "/?#":
            i = rest.find(stop)
            if 0 <= i < end:
                end = i
        target = rest[end:].partition("#")[0]
        if not target.startswith("/"):
            target = "/" + target
        if " " in target:
            raise ValueError(f"space in the URL: {url!r}")
        key = url[: len(scheme) + 3 + end]
        cached = self._urls.get(key)
        if cached is None:
            cached = self._urls[key] = _origin(scheme, rest[:end], url)
        return cached[0], target, cached[1]

    async def _acquire(self, origin: Origin) -> tuple[_Connection, bool]:
        """A connection for `origin`, and whether it was pooled (reused)."""
        idle = self._idle.get(origin)
        while idle:
            conn = idle.pop()  # the most recently used: least likely to have timed out
            if not conn.lost:
                return conn, True
        if self._closed:
            raise HttpConnectError("the client is closed")
        if self._count < self._max:
            self._count += 1
            return await self._connect(origin), False
        self._evict()
        waiter: asyncio.Future[_Connection | None] = asyncio.get_running_loop().create_future()
        self._waiters.append((origin, waiter))
        try:
            handed = await waiter
        except BaseException:
            self._abandon(origin, waiter)
            raise
        if handed is None:  # a slot was handed over
            return await self._connect(origin), False
        return handed, True

    def _abandon(self, origin: Origin, waiter: asyncio.Future[_Connection | None]) -> None:
        """A waiter was cancelled: pass on whatever it was handed."""
        if not waiter.done():
            self._waiters.remove((origin, waiter))
        elif not waiter.cancelled() and waiter.exception() is None:
            conn = waiter.result()
            if conn is None:
                self._slot_freed()
            else:
                self._release(conn, True)

    async def _connect(self, origin: Origin) -> _Connection:
        """Open a connection in a slot the caller holds."""
        scheme, host, port = origin
        loop = asyncio.get_running_loop()
        made: list[_Connection] = []

        def factory() -> _Connection:
            made.append(_Connection(self, origin, loop))
            return made[-1]

        tls = self._tls() if scheme == "https" else None
        try:
            async with asyncio.timeout(self.connect_timeout):
                _, conn = await loop.create_connection(
                    factory, host, port, ssl=tls, server_hostname=host if tls else None
                )
        except BaseException as exc:
            if not made or made[0].transport is None:
                self._slot_freed()  # else the connection's own close frees the slot
            if isinstance(exc, TimeoutError):
                limit = self.connect_timeout
                raise HttpTimeout(f"connecting to {host}:{port} took over {limit}s") from None
            if isinstance(exc, OSError):
                raise HttpConnectError(f"cannot connect to {host}:{port}: {exc}") from exc
            raise
        return conn

    def _tls(self) -> ssl.SSLContext:
        if self._ssl is None:
            import ssl

            self._ssl = ssl.create_default_context()
        return self._ssl

    def _evict(self) -> None:
        """Close the oldest idle connection of any origin, to free its slot."""
        for idle in self._idle.values():
            if idle:
                idle.pop(0).close()
                return

    def _release(self, conn: _Connection, keep_alive: bool) -> None:
        """Take back a connection whose response was read to the end."""
        if not (keep_alive and conn.reusable and not conn.lost and not self._closed):
            conn.close()
            return
        conn.idle()
        for i, (origin, waiter) in enumerate(self._waiters):
            if origin == conn.origin:
                del self._waiters[i]
                waiter.set_result(conn)
                return
        if self._waiters:
            conn.close()  # its slot goes to a waiter for another origin
        else:
            self._idle.setdefault(conn.origin, []).append(conn)

    def _gone(self, conn: _Connection) -> None:
        self._open.discard(conn)
        idle = self._idle.get(conn.origin)
        if idle and conn in idle:
            idle.remove(conn)
        self._slot_freed()

    def _slot_freed(self) -> None:
        if self._waiters:
            self._waiters.popleft()[1].set_result(None)
        else:
            self._count -= 1


def _origin(scheme: str, authority: str, url: str) -> tuple[Origin, str]:
    hostport = authority.rpartition("@")[2]
    if hostport.startswith("["):
        host, _, port = hostport[1:].partition("]")
        port = port.removeprefix(":")
    else:
        host, _, port = hostport.partition(":")
    if not host or (port and not port.isdigit()):
        raise ValueError(f"bad host or port in {url!r}")
    return (scheme, host, int(port) if port else _DEFAULT_PORTS[scheme]), hostport


def _encode_request(
    method: str, target: str, host: str, headers: HeaderSource, body: bytes
) -> bytes:
    fields = [("Host", host)]
    for name, value in as_pairs(headers):
        key = name.lower()
        if key == "host":
            fields[0] = (name, value)
        elif key not in _FRAMING:
            fields.append((name, value))
    extra = f"content-length: {len(body)}\r\n" if body or method in _WITH_BODY else ""
    return encode_head(f"{method} {target} HTTP/1.1", fields, extra) + body


class _Connection(BufferedReads):
    """One pooled connection; carries one exchange at a time."""

    def __init__(self, client: HttpClient, origin: Origin, loop: asyncio.AbstractEventLoop):
        self.client = client
        self.origin = origin
        self.loop = loop
        self.transport: asyncio.Transport | None = None
        self.gone: asyncio.Future[None] = loop.create_future()
        self.lost = False
        self.reusable = True
        self.busy = False
        self.got_bytes = False
        self.complete = False
        self._method = "GET"
        self._buf = b""
        self._head: ResponseHead | None = None
        self._reader: Reader | None = None
        self._chunks: collections.deque[bytes] = collections.deque()
        self._buffered = 0
        self._paused = False
        self._error: HttpReadError | None = None
        self._waiter: asyncio.Future[None] | None = None

    # -- asyncio.Protocol ------------------------------------------------------

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = cast(asyncio.Transport, transport)
        sock = transport.get_extra_info("socket")
        if sock is not None:
            with contextlib.suppress(OSError):
                sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        self.client._open.add(self)

    def connection_lost(self, exc: Exception | None) -> None:
        self.lost = True
        if self.busy and not self.complete and self._error is None:
            if exc is None and isinstance(self._reader, CloseReader):
                self.complete = True  # the body was delimited by the close
            else:
                why = f": {exc}" if exc else ""
                self._error = HttpReadError(f"connection closed mid-response{why}")
        self._wake()
        self.client._gone(self)
        self.gone.set_result(None)

    def eof_received(self) -> bool | None:
        return None  # close our side too

    def data_received(self, data: bytes) -> None:
        if not self.busy or self.complete:
            self.reusable = False  # bytes nobody asked for: the stream is out of step
            self.close()
            return
        self.got_bytes = True
        if self._head is None:
            if not self._parse_head(data):
                return
            data = self._buf
        self._feed(data)

    # -- one exchange ----------------------------------------------------------

    async def exchange(self, data: bytes, method: str) -> ResponseHead:
        """Send a request and wait for its final response head."""
        self.busy = True
        self._method = method
        assert self.transport is not None
        self.transport.write(data)
        while self._head is None:
            if self._error is not None:
                raise self._error
            await self._wait()
        return self._head

    async def next_chunk(self) -> bytes | None:
        """The next piece of the body, or None at its end."""
        while True:
            if self._chunks:
                chunk = self._chunks.popleft()
                self._buffered -= len(chunk)
                if self._paused and self._buffered < _HIGH_WATER // 4:
                    self._paused = False
                    self._transport().resume_reading()
                return chunk
            if self.complete:
                return None
            if self._error is not None:
                raise self._error
            await self._wait()

    def take_all(self) -> bytes:
        """The whole body, once `complete` (nothing more is read)."""
        chunks = self._chunks
        data = chunks[0] if len(chunks) == 1 else b"".join(chunks)
        chunks.clear()
        self._buffered = 0
        return data

    def idle(self) -> None:
        """Reset for the next exchange."""
        self.busy = self.got_bytes = self.complete = False
        self._head = self._reader = None

    def close(self) -> None:
        self.reusable = False
        if self.transport is not None:
            self.transport.close()

    # -- internals -------------------------------------------------------------

    def _transport(self) -> asyncio.Transport:
        assert self.transport is not None
        return self.transport

    def _parse_head(self, data: bytes) -> bool:
        """Buffer `data` until a final head; leaves the bytes after it in `_buf`."""
        buf = self._buf + data if self._buf else data
        while True:
            end = buf.find(b"\r\n\r\n")
            if end < 0:
                self._buf = buf
                if len(buf) > _MAX_HEAD:
                    self._fail("response head too large")
                return False
            try:
                head = parse_response_head(buf[:end])
                reader = head.reader(self._method)
            except ParseError as exc:
                self._fail(f"malformed response: {exc}")
                return False
            buf = buf[end + 4 :]
            if not 100 <= head.status < 200 or head.status == 101:
                break  # interim 1xx responses are skipped
        self._head, self._reader, self._buf = head, reader, buf
        self._wake()
        return True

    def _feed(self, data: bytes) -> None:
        reader = self._reader
        assert reader is not None
        self._buf = b""
        try:
            parts = reader.feed(data)
        except ParseError as exc:
            self._fail(f"malformed response body: {exc}")
            return
        if parts:
            self._chunks.extend(parts)
            self._buffered += sum(map(len, parts))
        if reader.done:
            self.complete = True
            if reader.tail:
                self.reusable = False
        elif self._buffered > _HIGH_WATER and not self._paused:
            self._paused = True
            self._transport().pause_reading()
        self._wake()

    def _fail(self, message: str) -> None:
        self._error = HttpReadError(message)
        self.close()
        self._wake()

    async def _wait(self) -> None:
        """Until `_wake`, or the read timeout."""
        waiter = self._waiter = self.loop.create_future()
        timeout = self.client.read_timeout
        timer = None
        if timeout is not None:
            timer = self.loop.call_later(timeout, _expire, waiter, timeout)
        try:
            await waiter
        finally:
            self._waiter = None
            if timer is not None:
                timer.cancel()

    def _wake(self) -> None:
        waiter = self._waiter
        if waiter is not None and not waiter.done():
            waiter.set_result(None)


def _expire(waiter: asyncio.Future[None], timeout: float) -> None:
    if not waiter.done():
        waiter.set_exception(HttpTimeout(f"no response data for {timeout}s"))


class ClientResponse(AsyncResource):
    """A response whose head has arrived; read the body with `read` or `aiter_bytes`.

    Close it (`aclose`, or `async with`) when not reading the body to the end: the
    connection then closes instead of going back to the pool.
    """

    def __init__(self, client: HttpClient, conn: _Connection, head: ResponseHead) -> None:
        self.status: int = head.status
        self.reason: str = head.reason
        self.headers: Headers = head.headers
        self.http_version: str = head.version
        self._client = client
        self._conn: _Connection | None = conn
        self._keep_alive = head.keep_alive()
        self._content: bytes | None = None

    @property
    def content(self) -> bytes:
        """The body, once `read`.

        Raises:
            RuntimeError: the body has not been read.
        """
        if self._content is None:
            raise RuntimeError("the body has not been read: await read() first")
        return self._content

    async def read(self) -> bytes:
        """The whole body (read once, then kept).

        Raises:
            HttpReadError: the connection broke or the body is malformed.
            HttpTimeout: a piece of the body took longer than the read timeout.
            RuntimeError: the body was already consumed by `aiter_bytes` or `aclose`.
        """
        if self._content is None:
            conn = self._conn
            if conn is not None and conn.complete:  # all in already: no generator
                self._content, self._conn = conn.take_all(), None
                self._client._release(conn, self._keep_alive)
            else:
                self._content = b"".join([chunk async for chunk in self._stream()])
        return self._content

    def aiter_bytes(self) -> AsyncIterator[bytes]:
        """The body as it arrives, de-chunked (same errors as `read`)."""
        if self._content is not None:
            return _once(self._content)
        return self._stream()

    def json(self) -> Any:
        """The body parsed as JSON, after `read`.

        Raises:
            RuntimeError: the body has not been read.
            orjson.JSONDecodeError: the body is not JSON (a `ValueError`).
        """
        return orjson.loads(self.content)

    async def aclose(self) -> None:
        """Release the connection: to the pool if the body was read, else closed."""
        conn, self._conn = self._conn, None
        if conn is not None:
            conn.close()

    async def _stream(self) -> AsyncIterator[bytes]:
        conn = self._conn
        if conn is None:
            raise RuntimeError("the response body was already consumed or closed")
        try:
            while (chunk := await conn.next_chunk()) is not None:
                yield chunk
        except BaseException:
            await self.aclose()
            raise
        self._conn = None
        self._client._release(conn, self._keep_alive)

    def __repr__(self) -> str:
        return f"<ClientResponse {self.status} {self.reason}>"


async def _once(data: bytes) -> AsyncIterator[bytes]:
    yield data
