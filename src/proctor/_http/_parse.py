"""Sans-IO HTTP/1.1 message parsing: heads, body framing, chunked coding.

Heads are parsed from the bytes before the blank line (the caller finds `\\r\\n\\r\\n`).
Line endings are strictly CRLF; a bare CR or LF, a NUL, obsolete line folding, or a field
name that is not a token is malformed, so no two parsers can disagree on where a message
ends (request smuggling). Bodies are read by one of three readers with one interface:
`feed(data) -> chunks`, then `done` and `tail` (the bytes past the end of the body).
"""

from __future__ import annotations

import re
from collections.abc import Iterable

from .._errors import ParseError
from ._headers import Headers, HeaderSource, as_pairs
from ._message import status_line

__all__ = [
    "ChunkedDecoder",
    "CloseReader",
    "LengthReader",
    "ParseError",
    "Reader",
    "RequestHead",
    "ResponseHead",
    "encode_chunk",
    "encode_head",
    "parse_request_head",
    "parse_response_head",
    "response_head",
    "split_framing",
]

_TOKEN = re.compile(r"[!#$%&'*+\-.^_`|~0-9A-Za-z]+")
_FIELD = re.compile(r"^([!#$%&'*+\-.^_`|~0-9A-Za-z]+):[ \t]*([^\r\n]*?)[ \t]*\r\n", re.M)
_TARGET = re.compile(r"[\x21-\x7e\x80-\xff]+")
_HEX = re.compile(rb"[0-9A-Fa-f]{1,15}")
_DIGITS = re.compile(r"[0-9]{1,18}")
_STATUS = re.compile(r"HTTP/1\.[01] [1-9][0-9][0-9](?: [^\x00-\x08\x0a-\x1f\x7f]*)?")
_VERSIONS = frozenset(("HTTP/1.1", "HTTP/1.0"))
_MAX_LINE = 4096  # a chunk-size line or one trailer field
_MAX_TRAILERS = 65536
_FRAMING_FIELDS = frozenset(("content-length", "transfer-encoding", "connection"))


class RequestHead:
    """A parsed request line and header block, with the body framing decided."""

    __slots__ = ("chunked", "headers", "keep_alive", "length", "method", "target", "version")

    def __init__(self, method: str, target: str, version: str, headers: Headers) -> None:
        self.method = method
        self.target = target
        self.version = version
        self.headers = headers
        self.chunked, self.length = _framing(headers)
        self.keep_alive = _keep_alive(version, headers)


class ResponseHead:
    """A parsed status line and header block."""

    __slots__ = ("headers", "reason", "status", "version")

    def __init__(self, version: str, status: int, reason: str, headers: Headers) -> None:
        self.version = version
        self.status = status
        self.reason = reason
        self.headers = headers

    def keep_alive(self) -> bool:
        """Whether the connection may carry another request after this response."""
        return _keep_alive(self.version, self.headers)

    def reader(self, method: str) -> Reader:
        """The body reader for this response to a `method` request.

        Raises:
            ParseError: conflicting or invalid framing headers.
        """
        if method == "HEAD" or self.status < 200 or self.status in (204, 304):
            return LengthReader(0)
        chunked, length = _framing(self.headers)
        if chunked:
            return ChunkedDecoder()
        return CloseReader() if length is None else LengthReader(length)


def _split(head: bytes) -> tuple[str, Headers]:
    """The start line and the header fields of a head."""
    text = head.decode("latin-1")
    # A CR or LF that is not part of a CRLF, or a NUL, is a smuggling vector: refuse it.
    crlf = text.count("\r\n")
    if text.count("\r") != crlf or text.count("\n") != crlf or "\x00" in text:
        raise ParseError("bare CR, LF or NUL in the head")
    start, _, block = text.partition("\r\n")
    return start, _fields(block, crlf)


def _fields(block: str, count: int) -> Headers:
    """`count` CRLF-separated field lines, each checked by one anchored regex."""
    if not count:
        return Headers._trusted([], [])
    items: list[tuple[str, str]] = _FIELD.findall(block + "\r\n")
    if len(items) != count:
        raise ParseError("malformed header field")
    return Headers._trusted(items, [name.lower() for name, _ in items])


def parse_request_head(head: bytes) -> RequestHead:
    """Parse a request head (without its final blank line).

    Raises:
        ParseError: anything malformed (status 400), or an unknown HTTP version (505).
    """
    line, headers = _split(head)
    parts = line.split(" ")
    if len(parts) != 3:
        raise ParseError(f"malformed request line {line[:64]!r}")
    method, target, version = parts
    if _TOKEN.fullmatch(method) is None or _TARGET.fullmatch(target) is None:
        raise ParseError(f"malformed request line {line[:64]!r}")
    if version not in _VERSIONS:
        if version.startswith("HTTP/"):
            raise ParseError(f"unsupported version {version[:16]!r}", 505)
        raise ParseError(f"malformed request line {line[:64]!r}")
    return RequestHead(method, target, version, headers)


def parse_response_head(head: bytes) -> ResponseHead:
    """Parse a response head (without its final blank line).

    Raises:
        ParseError: the status line or a header field is malformed.
    """
    line, headers = _split(head)
    if _STATUS.fullmatch(line) is None:
        raise ParseError(f"malformed status line {line[:64]!r}")
    return ResponseHead(line[:8], int(line[9:12]), line[13:], headers)


def _framing(headers: Headers) -> tuple[bool, int | None]:
    """(chunked, content length) from the framing headers, refusing ambiguity."""
    keys = headers._keys
    if "transfer-encoding" not in keys:  # the usual head: one plain length, or none
        if "content-length" not in keys:
            return False, None
        at = keys.index("content-length")
        value = headers._items[at][1]
        plain = value.isascii() and value.isdigit() and len(value) <= 18
        if plain and "content-length" not in keys[at + 1 :]:
            return False, int(value)
    te: list[str] = []
    cl: list[str] = []
    for key, (_, value) in zip(headers._keys, headers._items, strict=True):
        if key == "content-length":
            cl.append(value)
        elif key == "transfer-encoding":
            te.append(value)
    if te:
        codings = [c.strip().lower() for v in te for c in v.split(",")]
        if codings[-1] != "chunked" or "chunked" in codings[:-1] or cl:
            raise ParseError("unsupported or ambiguous transfer-encoding")
        return True, None
    if not cl:
        return False, None
    values = {v.strip() for item in cl for v in item.split(",")}
    if len(values) != 1:
        raise ParseError("conflicting content-length values")
    value = values.pop()
    if _DIGITS.fullmatch(value) is None:
        raise ParseError(f"invalid content-length {value[:32]!r}")
    return False, int(value)


def _keep_alive(version: str, headers: Headers) -> bool:
    if "connection" not in headers._keys:
        return version == "HTTP/1.1"
    tokens = ",".join(headers.get_all("connection")).lower()
    if version == "HTTP/1.1":
        return "close" not in tokens
    return "keep-alive" in tokens


class LengthReader:
    """A body of a known length."""

    __slots__ = ("done", "remaining", "tail")

    def __init__(self, length: int) -> None:
        self.remaining = length
        self.done = length == 0
        self.tail = b""

    def feed(self, data: bytes) -> list[bytes]:
        """Consume `data`; bytes past the end go to `tail`."""
        n = self.remaining
        if len(data) < n:
            self.remaining = n - len(data)
            return [data] if data else []
        self.remaining = 0
        self.done = True
        self.tail = data[n:]
        return [data[:n]] if n else []


class CloseReader:
    """A response body delimited by the connection closing."""

    __slots__ = ("done", "tail")

    def __init__(self) -> None:
        self.done = False
        self.tail = b""

    def feed(self, data: bytes) -> list[bytes]:
        """Everything is body."""
        return [data] if data else []


_SIZE, _DATA, _CRLF, _TRAILER = range(4)


class ChunkedDecoder:
    """Incremental decoder of the chunked transfer coding, trailers included.

    Raises `ParseError` from `feed` on a bad chunk size, a missing CRLF after a chunk,
    an overlong size line, or malformed or oversized trailers.
    """

    __slots__ = ("_buf", "_left", "_state", "_trailer_bytes", "done", "tail", "trailers")

    def __init__(self) -> None:
        self._buf = b""
        self._state = _SIZE
        self._left = 0
        self._trailer_bytes = 0
        self.done = False
        self.tail = b""
        self.trailers = Headers()

    def feed(self, data: bytes) -> list[bytes]:
        """Decode `data`; returns the body bytes it completes, in order."""
        buf = self._buf + data if self._buf else data
        out: list[bytes] = []
        pos, n = 0, len(buf)
        while pos < n:
            state = self._state
            if state == _DATA:
                take = min(self._left, n - pos)
                out.append(buf[pos : pos + take])
                pos += take
                self._left -= take
                if not self._left:
                    self._state = _CRLF
            elif state == _CRLF:
                if n - pos < 2:
                    break
                if buf[pos : pos + 2] != b"\r\n":
                    raise ParseError("missing CRLF after a chunk")
                pos += 2
                self._state = _SIZE
            else:
                end = buf.find(b"\r\n", pos)
                if end < 0:
                    if n - pos > _MAX_LINE:
                        raise ParseError("overlong chunk size or trailer line")
                    break
                line, pos = buf[pos:end], end + 2
                if state == _SIZE:
                    self._size_line(line)
                elif line:
                    self._trailer(line)
                else:
                    self.done = True
                    self.tail = buf[pos:]
                    self._buf = b""
                    return out
        self._buf = buf[pos:]
        return out

    def _size_line(self, line: bytes) -> None:
        size = line.split(b";", 1)[0].rstrip(b" \t")
        if _HEX.fullmatch(size) is None:
            raise ParseError(f"bad chunk size {line[:32]!r}")
        self._left = int(size, 16)
        self._state = _DATA if self._left else _TRAILER

    def _trailer(self, line: bytes) -> None:
        self._trailer_bytes += len(line) + 2
        if self._trailer_bytes > _MAX_TRAILERS:
            raise ParseError("trailers too large")
        text = line.decode("latin-1")
        if "\x00" in text:
            raise ParseError("NUL in a trailer field")
        for name, value in _fields(text, 1):
            self.trailers.add(name, value)


Reader = LengthReader | CloseReader | ChunkedDecoder


def encode_chunk(data: bytes) -> bytes:
    """One chunk of the chunked transfer coding (`data` must not be empty)."""
    return b"%x\r\n%b\r\n" % (len(data), data)


def encode_head(start: str, fields: Iterable[tuple[str, str]], extra: str = "") -> bytes:
    """A message head: the start line, the fields, `extra` (pre-formatted lines), a blank.

    Raises:
        ValueError: a name or value holds CR or LF, or is not latin-1.
    """
    lines = [f"{name}: {value}\r\n" for name, value in fields]
    text = f"{start}\r\n{''.join(lines)}{extra}\r\n"
    # Counting catches header injection: every CR and LF must be a line end we wrote.
    ends = len(lines) + extra.count("\n") + 2
    if text.count("\n") != ends or text.count("\r") != ends:
        raise ValueError("CR or LF inside a header name or value")
    return text.encode("latin-1")


def split_framing(
    headers: HeaderSource, close: bool
) -> tuple[list[tuple[str, str]], bool, int | None]:
    """The caller's fields without framing ones; whether to close; a given length."""
    fields: list[tuple[str, str]] = []
    length: int | None = None
    for name, value in as_pairs(headers):
        key = name.lower()
        if key not in _FRAMING_FIELDS:
            fields.append((name, value))
        elif key == "connection":
            close = close or "close" in value.lower()
        elif key == "content-length":
            length = int(value)
    return fields, close, length


def response_head(
    status: int,
    fields: HeaderSource,
    close: bool,
    length: int | None,
    chunked: bool,
    request: RequestHead | None,
) -> bytes:
    """A response head: the caller's fields and the framing ones (`request`: the request
    answered, whose HTTP/1.0 keep-alive is said back)."""
    extra = ""
    if chunked:
        extra = "transfer-encoding: chunked\r\n"
    elif length is not None:
        extra = f"content-length: {length}\r\n"
    if close:
        extra += "connection: close\r\n"
    elif request is not None and request.version == "HTTP/1.0":
        extra += "connection: keep-alive\r\n"
    return encode_head(status_line(status), as_pairs(fields), extra)
