"""The server's messages: `Request`, `Response`, the handler and screen types, and the
server's own error responses."""

from __future__ import annotations

from collections.abc import AsyncIterable, Awaitable, Callable
from dataclasses import dataclass
from http import HTTPStatus
from typing import Any

import orjson

from ._headers import Headers, HeaderSource, as_pairs

__all__ = ["Handler", "Request", "Response", "Screen", "Share", "error_response", "status_line"]

_status_lines: dict[int, str] = {}


@dataclass(slots=True)
class Request:
    """One request, its body read in full."""

    method: str
    target: str
    headers: Headers
    body: bytes
    client: tuple[str, int] | None = None
    share: Share | None = None  # the share the server's screen charged it to

    @property
    def path(self) -> str:
        """The target without its query string."""
        return self.target.partition("?")[0]

    @property
    def query(self) -> str:
        """The query string, without `?` (empty when there is none)."""
        return self.target.partition("?")[2]

    def json(self) -> Any:
        """The body parsed as JSON.

        Raises:
            orjson.JSONDecodeError: the body is not JSON (a `ValueError`).
        """
        return orjson.loads(self.body)


@dataclass(slots=True)
class Response:
    """A response; an async iterable body is streamed, each chunk written as it comes.

    A streamed body goes out with `Transfer-Encoding: chunked`, or raw when the headers
    carry a `Content-Length` (the body must then yield exactly that many bytes).
    """

    status: int = 200
    headers: HeaderSource = ()
    body: bytes | AsyncIterable[bytes] = b""

    @classmethod
    def json(cls, obj: Any, status: int = 200, headers: HeaderSource | None = None) -> Response:
        """A JSON response (orjson; `content-type: application/json`)."""
        return cls(status, _with_type(headers, "application/json"), orjson.dumps(obj))

    @classmethod
    def text(
        cls,
        text: str,
        status: int = 200,
        headers: HeaderSource | None = None,
        content_type: str = "text/plain; charset=utf-8",
    ) -> Response:
        """A text response, UTF-8 encoded."""
        return cls(status, _with_type(headers, content_type), text.encode())


Handler = Callable[[Request], Awaitable[Response]]


def _with_type(headers: HeaderSource | None, content_type: str) -> list[tuple[str, str]]:
    pairs = [("content-type", content_type)]
    if headers is not None:
        pairs.extend(as_pairs(headers))
    return pairs


def status_line(status: int) -> str:
    line = _status_lines.get(status)
    if line is None:
        try:
            phrase = HTTPStatus(status).phrase
        except ValueError:
            phrase = ""
        line = _status_lines[status] = f"HTTP/1.1 {status} {phrase}"
    return line


def error_response(status: int, message: str) -> Response:
    """The server's own error. 408 and 503 invite a retry (the request was not handled);
    any other is final, and says so to SDKs that honour `x-should-retry`."""
    if status == 503:
        headers = [("retry-after", "1")]
    else:
        headers = [] if status == 408 else [("x-should-retry", "false")]
    return Response.json({"error": {"code": status, "message": message}}, status, headers)


Screen = Callable[[Request], "Response | Share | None"]
"""Called with a request whose head has arrived and whose body has not (`body` is
empty): None lets it through; a response (with a bytes body) is sent instead, and the
body is never read; a `Share` lets it through charged to that share."""


class Share:
    """One owner's part of an `HttpServer` (a proxy session): how many of its requests
    the server holds at once (from head to response) and how many of their body bytes.

    A screen returns the share a request's head names; the server charges the request
    to it before reading the body. A head whose `Content-Length` alone is over
    `max_buffered` gets 413; one that would take the share past either cap gets 429
    (both final: `x-should-retry: false`), so an owner's flood is refused on its own
    share, never on the server's: such requests count against the server's
    `max_buffered` only by the bytes that actually arrived. A chunked body is charged
    as it arrives.

    Args:
        max_requests: requests held at once.
        max_buffered: body bytes held at once (announced lengths, in full).
        refusal: builds the response for a refusal from (status, message); the
            server's own JSON error by default.
        owner: whatever the screen wants to find again from `Request.share` (the
            proxy's session), so the handler need not look it up a second time.
    """

    __slots__ = ("buffered", "max_buffered", "max_requests", "owner", "refusal", "requests")

    def __init__(
        self,
        max_requests: int,
        max_buffered: int,
        refusal: Callable[[int, str], Response] | None = None,
        owner: object = None,
    ) -> None:
        if max_requests < 1 or max_buffered < 1:
            raise ValueError("Share.max_requests and max_buffered must be positive")
        self.max_requests = max_requests
        self.max_buffered = max_buffered
        self.refusal = refusal
        self.owner = owner
        self.requests = 0
        self.buffered = 0

    def __repr__(self) -> str:
        return (
            f"<Share requests={self.requests}/{self.max_requests} "
            f"buffered={self.buffered}/{self.max_buffered}>"
        )

    def take(self, length: int) -> tuple[int, str] | None:
        """Charge one request announcing `length` body bytes; the refusal, if any."""
        if length > self.max_buffered:
            return 413, f"request body over this client's share ({self.max_buffered} bytes)"
        if self.requests >= self.max_requests:
            return 429, f"this client already has {self.requests} requests in hand"
        if self.buffered + length > self.max_buffered:
            return 429, "this client's requests already hold its share of request bytes"
        self.requests += 1
        self.buffered += length
        return None

    def grow(self, size: int) -> bool:
        """Charge `size` more bytes of a request already taken; False past the cap."""
        self.buffered += size
        return self.buffered <= self.max_buffered

    def give_back(self, size: int) -> None:
        """Release a request taken, with the bytes charged for it."""
        self.requests -= 1
        self.buffered -= size
