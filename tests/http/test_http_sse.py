"""SSEParser against the WHATWG event-stream rules; any split of the bytes parses the same."""

from __future__ import annotations

import time

import pytest
from hypothesis import given
from hypothesis import strategies as st

from proctor._http import SSEEvent, SSEParser, format_sse


def parse(*feeds: bytes) -> list[SSEEvent]:
    parser = SSEParser()
    return [event for data in feeds for event in parser.feed(data)]


def test_openai_style_stream() -> None:
    stream = b'data: {"a":1}\n\ndata: {"a":2}\n\ndata: [DONE]\n\n'
    assert parse(stream) == [
        SSEEvent(None, '{"a":1}'),
        SSEEvent(None, '{"a":2}'),
        SSEEvent(None, "[DONE]"),
    ]


def test_anthropic_style_stream() -> None:
    stream = b"event: message_start\ndata: {}\n\nevent: ping\ndata: {}\n\n"
    assert parse(stream) == [SSEEvent("message_start", "{}"), SSEEvent("ping", "{}")]


def test_fields_comments_and_line_endings() -> None:
    stream = (
        b"\xef\xbb\xbf: a comment\r\n"
        b"data:no space\r"
        b"data:  two spaces\n"
        b"id: 7\n"
        b"retry: 1500\n"
        b"retry: soon\n"
        b"unknown: x\n"
        b"\r\n"
        b"data\n\n"  # a field name alone is an empty value
        b"event: x\n\n"  # no data: nothing dispatched, the type resets
        b"event:\ndata: y\n\n"  # an empty type is the default type
        b"id: a\x00b\ndata: z\n\n"  # an id with NUL is ignored
        b"data: unfinished"
    )
    parser = SSEParser()
    assert parser.feed(stream) == [
        SSEEvent(None, "no space\n two spaces", "7"),
        SSEEvent(None, "", "7"),
        SSEEvent(None, "y", "7"),
        SSEEvent(None, "z", "7"),
    ]
    assert parser.retry == 1500


def test_crlf_split_across_feeds_is_one_line_end() -> None:
    assert parse(b"data: a\r", b"\ndata: b\r", b"\r") == [SSEEvent(None, "a\nb")]


def test_bom_split_across_feeds() -> None:
    assert parse(b"\xef", b"\xbb", b"\xbfdata: x\n\n") == [SSEEvent(None, "x")]


def test_utf8_split_across_feeds() -> None:
    data = "data: héllo ☃\n\n".encode()
    assert parse(data[:8], data[8:]) == [SSEEvent(None, "héllo ☃")]


def test_a_long_line_in_small_feeds_costs_about_what_one_feed_does() -> None:
    # A multi-MB event (a big tool-call argument, a base64 image) arrives in socket-sized
    # pieces. Re-joining the partial line on every feed made that quadratic: 4 MiB in
    # 16 KiB feeds cost ~100 one-shot parses. Linear, it costs about one. (Compared with
    # one feed of the same bytes on the same machine, so no absolute threshold.)
    line = b"data: " + b"x" * (4 << 20)
    stream = line + b"\n\n"
    feeds = [stream[i : i + (16 << 10)] for i in range(0, len(stream), 16 << 10)]

    def best(*pieces: bytes) -> float:
        times = []
        for _ in range(3):
            parser = SSEParser()
            start = time.perf_counter()
            events = [e for piece in pieces for e in parser.feed(piece)]
            times.append(time.perf_counter() - start)
            assert len(events) == 1 and len(events[0].data) == len(line) - 6
        return min(times)

    chunked, whole = best(*feeds), best(stream)
    assert chunked < 10 * whole, f"{len(feeds)} feeds: {chunked:.4f}s, one feed: {whole:.4f}s"


def test_format_sse() -> None:
    assert format_sse("a\nb") == b"data: a\ndata: b\n\n"
    assert format_sse(b"x", event="e", id="1") == b"event: e\nid: 1\ndata: x\n\n"
    with pytest.raises(ValueError, match="line break"):
        format_sse("x", event="a\nb")


streams = st.lists(
    st.one_of(
        st.sampled_from(
            [b"data: x", b"data:", b"event: e", b"id: 1", b":c", b"retry: 9", b"", b"data"]
        ),
        st.text(
            st.characters(exclude_categories=["Cs"], exclude_characters="\r\n"), max_size=8
        ).map(str.encode),
    ),
    max_size=20,
).flatmap(
    lambda lines: st.lists(
        st.sampled_from([b"\n", b"\r", b"\r\n"]), min_size=len(lines), max_size=len(lines)
    ).map(lambda ends: b"".join(line + end for line, end in zip(lines, ends, strict=True)))
)


@given(streams, st.lists(st.integers(0, 400), max_size=8))
def test_any_split_parses_like_one_feed(stream: bytes, cuts: list[int]) -> None:
    points = sorted({min(c, len(stream)) for c in cuts})
    pieces = [stream[a:b] for a, b in zip([0, *points], [*points, len(stream)], strict=True)]
    assert parse(*pieces) == parse(stream)


@given(
    st.text(max_size=50),
    st.none()
    | st.text(st.characters(exclude_categories=["Cs"], exclude_characters="\r\n"), max_size=8),
)
def test_format_then_parse_round_trips(data: str, event: str | None) -> None:
    expected = data.replace("\r\n", "\n").replace("\r", "\n")
    assert parse(format_sse(data, event=event)) == [SSEEvent(event or None, expected)]
