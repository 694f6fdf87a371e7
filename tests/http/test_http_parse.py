"""The sans-IO parsers: heads round-trip, chunked decoding ignores how bytes are split."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from proctor._http._parse import (
    ChunkedDecoder,
    ParseError,
    encode_chunk,
    encode_head,
    parse_request_head,
    parse_response_head,
)

tokens = st.text("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789-_.!~", min_size=1)
values = st.text(st.characters(min_codepoint=0x20, max_codepoint=0xFF, exclude_characters="\x7f"))
names = tokens.filter(lambda n: n.lower() not in ("content-length", "transfer-encoding"))
fields = st.lists(st.tuples(names, values), max_size=10)


def split(data: bytes, cuts: list[int]) -> list[bytes]:
    points = sorted({min(c, len(data)) for c in cuts})
    return [data[a:b] for a, b in zip([0, *points], [*points, len(data)], strict=True)]


@given(tokens, st.text(st.characters(min_codepoint=0x21, max_codepoint=0x7E), min_size=1), fields)
def test_request_head_round_trips(method: str, target: str, headers: list[tuple[str, str]]) -> None:
    head = encode_head(f"{method} {target} HTTP/1.1", headers)
    parsed = parse_request_head(head[:-4])
    assert (parsed.method, parsed.target, parsed.version) == (method, target, "HTTP/1.1")
    assert parsed.headers.items() == [(n, v.strip(" \t")) for n, v in headers]


@given(st.integers(100, 999), values.filter(lambda v: v == v.strip()), fields)
def test_response_head_round_trips(
    status: int, reason: str, headers: list[tuple[str, str]]
) -> None:
    parsed = parse_response_head(encode_head(f"HTTP/1.0 {status} {reason}", headers)[:-4])
    assert (parsed.version, parsed.status, parsed.reason) == ("HTTP/1.0", status, reason)
    assert len(parsed.headers) == len(headers)


@pytest.mark.parametrize(
    "line", [b"HTTP/1.1 20 OK", b"HTTP/2 200 OK", b"HTTP/1.1 200\tOK", b"http/1.1 200 OK"]
)
def test_malformed_status_lines(line: bytes) -> None:
    with pytest.raises(ParseError):
        parse_response_head(line)


def test_encode_head_refuses_injection() -> None:
    for bad in ("a\r\nb", "a\rb", "a\nb"):
        with pytest.raises(ValueError, match="CR or LF"):
            encode_head("GET / HTTP/1.1", [("x", bad)])


def test_response_framing() -> None:
    def reader(head: bytes, method: str = "GET") -> type:
        return type(parse_response_head(head).reader(method))

    assert reader(b"HTTP/1.1 200 OK\r\nContent-Length: 3").__name__ == "LengthReader"
    assert reader(b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked").__name__ == "ChunkedDecoder"
    assert reader(b"HTTP/1.1 200 OK").__name__ == "CloseReader"
    assert parse_response_head(b"HTTP/1.1 200 OK").reader("HEAD").done
    assert parse_response_head(b"HTTP/1.1 304 Not Modified").reader("GET").done
    assert not parse_response_head(b"HTTP/1.0 200 OK").keep_alive()
    assert not parse_response_head(b"HTTP/1.1 200 OK\r\nConnection: close").keep_alive()


@pytest.mark.parametrize(
    "fields, length",
    [
        ("Content-Length: 12", 12),
        ("Content-Length: 0012", 12),
        ("Content-Length: 5\r\ncontent-length: 5", 5),  # the same length twice
        ("Content-Length: 5, 5", 5),
        ("X-A: 1", None),
    ],
)
def test_request_lengths(fields: str, length: int | None) -> None:
    head = parse_request_head(f"POST / HTTP/1.1\r\n{fields}".encode())
    assert (head.chunked, head.length) == (False, length)


@pytest.mark.parametrize(
    "fields",
    [
        "Content-Length: 5\r\nContent-Length: 6",
        "Content-Length: 5, 6",
        "Content-Length: +5",
        "Content-Length: \xb2",  # a digit to str.isdigit, not to HTTP
        "Content-Length: " + "9" * 19,
        "Content-Length: 5\r\nTransfer-Encoding: chunked",
    ],
)
def test_bad_request_lengths(fields: str) -> None:
    with pytest.raises(ParseError):
        parse_request_head(f"POST / HTTP/1.1\r\n{fields}".encode("latin-1"))


chunked_bodies = st.tuples(
    st.lists(st.binary(min_size=1, max_size=40), max_size=8),
    st.lists(st.tuples(tokens, values.map(str.strip)), max_size=3),
    st.binary(max_size=10),
    st.sampled_from(["", ";ext", ";a=b;c"]),
)


@given(chunked_bodies, st.lists(st.integers(0, 600), max_size=10))
def test_chunked_decoding_ignores_splits(
    body: tuple[list[bytes], list[tuple[str, str]], bytes, str], cuts: list[int]
) -> None:
    chunks, trailers, tail, ext = body
    wire = b"".join(
        b"%x%b\r\n%b\r\n" % (len(c), ext.encode(), c) if ext else encode_chunk(c) for c in chunks
    )
    wire += b"0\r\n" + b"".join(f"{n}: {v}\r\n".encode("latin-1") for n, v in trailers) + b"\r\n"
    decoder = ChunkedDecoder()
    out, rest = b"", b""
    for piece in split(wire + tail, cuts):
        if decoder.done:
            rest += piece
        else:
            out += b"".join(decoder.feed(piece))
    assert decoder.done
    assert out == b"".join(chunks)
    assert decoder.trailers.items() == trailers
    assert decoder.tail + rest == tail


@given(st.binary(max_size=60), st.lists(st.integers(0, 80), max_size=6))
def test_chunked_decoder_never_crashes_on_garbage(data: bytes, cuts: list[int]) -> None:
    decoder = ChunkedDecoder()
    try:
        for piece in split(data, cuts):
            decoder.feed(piece)
    except ParseError:
        pass


@pytest.mark.parametrize(
    "wire",
    [
        b"x\r\n",
        b"-1\r\n",
        b" 1\r\n",
        b"1_0\r\n",
        b"0x1\r\n",
        b"1\r\nabc",
        b"1000000000000000\r\n",
        b"0\r\nno colon\r\n",
        b"f" * 5000,
    ],
)
def test_bad_chunks(wire: bytes) -> None:
    with pytest.raises(ParseError):
        ChunkedDecoder().feed(wire)
