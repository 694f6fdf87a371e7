"""Sans-IO framing: NDJSON splitting, the frame limit, and the JSON codec (DESIGN 3)."""

from __future__ import annotations

import asyncio
import json
import math
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from proctor.channel._framing import (
    MAX_INT_DIGITS,
    FrameTooLarge,
    LineBuffer,
    ParseError,
    decode,
    encode,
)

# A frame is any line without a newline; blank ones are skipped by the reader.
LINES = st.lists(st.binary(max_size=40).map(lambda b: b.replace(b"\n", b"")), max_size=12)
JSON = st.recursive(
    st.none()
    | st.booleans()
    | st.integers()
    | st.floats(allow_nan=False, allow_infinity=False)
    | st.text(),
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(), inner, max_size=4),
    max_leaves=20,
)
IDS = st.none() | st.text() | st.integers() | st.floats(allow_nan=False, allow_infinity=False)


def chunked(data: bytes, cuts: list[int]) -> list[bytes]:
    points = sorted({c % (len(data) + 1) for c in cuts})
    return [data[a:b] for a, b in zip([0, *points], [*points, len(data)], strict=True)]


def feed_all(buffer: LineBuffer, chunks: list[bytes]) -> list[bytes]:
    return [line for chunk in chunks for line in buffer.feed(chunk)]


# --- LineBuffer ------------------------------------------------------------------------------


@given(LINES, st.lists(st.integers(min_value=0), max_size=30))
def test_splitting_is_invariant_under_chunking(lines: list[bytes], cuts: list[int]) -> None:
    stream = b"".join(line + b"\n" for line in lines)
    expected = [line for line in lines if line.strip()]
    assert feed_all(LineBuffer(), chunked(stream, cuts)) == expected
    assert feed_all(LineBuffer(), [stream[i : i + 1] for i in range(len(stream))]) == expected


@given(LINES, st.lists(st.integers(min_value=0), max_size=30), st.integers(4, 24))
def test_the_limit_is_enforced_the_same_way_under_any_chunking(
    lines: list[bytes], cuts: list[int], limit: int
) -> None:
    """Frames before an oversized one are all delivered; the oversized one never is."""
    stream = b"".join(line + b"\n" for line in lines)
    first_big = next((i for i, line in enumerate(lines) if len(line) > limit), None)
    good = lines if first_big is None else lines[:first_big]
    expected = [line for line in good if line.strip()]
    buffer = LineBuffer(limit)
    got: list[bytes] = []
    try:
        for chunk in chunked(stream, cuts):
            got += buffer.feed(chunk)
    except FrameTooLarge as exc:
        assert first_big is not None
        got += exc.frames
    else:
        assert first_big is None
    assert got == expected


def test_a_frame_of_exactly_the_limit_passes_and_one_more_byte_does_not() -> None:
    assert LineBuffer(8).feed(b"12345678\n") == [b"12345678"]
    buffer = LineBuffer(8)
    assert buffer.feed(b"1234") == []
    assert buffer.feed(b"5678\n") == [b"12345678"]
    with pytest.raises(FrameTooLarge):
        LineBuffer(8).feed(b"123456789\n")
    buffer = LineBuffer(8)
    buffer.feed(b"12345678")
    with pytest.raises(FrameTooLarge):
        buffer.feed(b"9")  # no newline yet: refused as soon as it is too long


def test_frames_before_an_oversized_one_are_kept() -> None:
    with pytest.raises(FrameTooLarge) as info:
        LineBuffer(4).feed(b"ab\ncd\n123456\nef\n")
    assert info.value.frames == [b"ab", b"cd"]
    buffer = LineBuffer(4)
    assert buffer.feed(b"ab\nc") == [b"ab"]
    with pytest.raises(FrameTooLarge) as info:
        buffer.feed(b"d\nxy\n123456")  # the tail is too long before its newline
    assert info.value.frames == [b"cd", b"xy"]


def test_feed_first_reads_only_the_preface() -> None:
    buffer = LineBuffer()
    assert buffer.feed_first(b'\n\r\n{"a"') == (None, b"")
    assert buffer.feed_first(b":1}\nraw\nbytes") == (b'{"a":1}', b"raw\nbytes")
    with pytest.raises(FrameTooLarge):
        LineBuffer(4).feed_first(b"12345")


# --- codec -------------------------------------------------------------------------------


@given(JSON)
def test_encode_decode_round_trip(value: Any) -> None:
    line = encode(value)
    assert line.endswith(b"\n") and b"\n" not in line[:-1]
    assert decode(line) == value
    assert json.loads(line) == value  # what any other JSON reader sees


@given(st.integers(-(10**MAX_INT_DIGITS) + 1, 10**MAX_INT_DIGITS - 1))
def test_integers_within_the_documented_limit_stay_exact(n: int) -> None:
    assert type(decode(encode(n))) is int and decode(encode(n)) == n
    assert decode(str(n).encode()) == n
    assert decode(encode({"x": [n, 1.5, "12345678901234567890"]})) == {
        "x": [n, 1.5, "12345678901234567890"]
    }


@pytest.mark.parametrize("digits", ["2" * 309, "-" + "1" * 401, "9" * 4300, "7" * 5000])
def test_integers_beyond_the_limit_are_refused_both_ways(digits: str) -> None:
    """docs/wire.md: integers below 1.8e308 cross exactly; a larger one is not JSON here."""
    if len(digits) <= 4300:  # the interpreter will not even make bigger ones from text
        with pytest.raises(TypeError):
            encode({"id": 1, "result": int(digits)})
    with pytest.raises(ParseError):
        decode(f'{{"x":[1,{digits}]}}'.encode())


def test_encode_is_compact_utf8() -> None:
    assert encode({"a": [1, 2.5, None, True], "é": "☃"}) == (
        '{"a":[1,2.5,null,true],"é":"☃"}\n'.encode()
    )


@pytest.mark.parametrize(
    "value",
    [object(), {"prompt": "\ud800"}, {1: math.nan}, {"a": {1, 2}}],
    ids=["object", "lone-surrogate", "nan-with-int-key", "set"],
)
def test_encode_refuses_what_is_not_json_with_type_error(value: Any) -> None:
    with pytest.raises(TypeError):
        encode(value)


def test_encode_refuses_cycles_with_type_error() -> None:
    cycle: list[Any] = []
    cycle.append(cycle)
    with pytest.raises(TypeError):
        encode(cycle)


@pytest.mark.parametrize(
    "line",
    [b"", b"{", b"NaN", b"[1,]", b"\xff", b'"\\ud800"', b"1e400", b"[" * 2000 + b"]" * 2000],
)
def test_decode_refuses_bad_json(line: bytes) -> None:
    with pytest.raises(ParseError):
        decode(line)


def test_deep_nesting_with_long_digit_runs_is_still_decoded() -> None:
    deep = b"[" * 1020 + b'"123456789012345678901234567890"' + b"]" * 1020
    value = decode(deep)
    for _ in range(1020):
        value = value[0]
    assert value == "123456789012345678901234567890"


# --- ids over the real session code ----------------------------------------------------------


async def test_any_valid_id_is_echoed_exactly(server) -> None:
    replies: list[bytes] = []

    class Catch(asyncio.Protocol):
        def data_received(self, data: bytes) -> None:
            replies.append(data)

    transport = server.connect_memory(Catch())

    @settings(max_examples=300, deadline=None)
    @given(IDS)
    def check(rid: Any) -> None:
        replies.clear()
        request = {"jsonrpc": "2.0", "id": rid, "method": "tasks.cancel"}
        transport.write(json.dumps(request).encode() + b"\n")  # the stdlib, exact
        [reply] = replies
        echoed = json.loads(reply)["id"]
        assert type(echoed) is type(rid) and echoed == rid
        if isinstance(rid, float):
            assert math.copysign(1, echoed) == math.copysign(1, rid)

    check()
    transport.close()


async def test_the_server_reads_the_same_frames_under_any_chunking(server) -> None:
    """Preface and session framing together: replies do not depend on how bytes arrive."""
    replies: list[bytes] = []

    class Catch(asyncio.Protocol):
        def data_received(self, data: bytes) -> None:
            replies.append(data)

    @settings(max_examples=150, deadline=None)
    @given(
        st.lists(st.sampled_from([b"", b" ", b"\r", b"not json", b"[]"]), max_size=6),
        st.integers(1, 8),
        st.lists(st.integers(min_value=0), max_size=20),
    )
    def check(junk: list[bytes], n: int, cuts: list[int]) -> None:
        lines = [
            *junk,
            *(b'{"jsonrpc":"2.0","id":%d,"method":"tasks.cancel"}' % i for i in range(n)),
        ]
        stream = b"".join(line + b"\n" for line in lines)
        whole = serve([stream])
        assert serve(chunked(stream, cuts)) == whole
        assert whole.count(b'"result":{"cancelled":false}') == n

    def serve(chunks: list[bytes]) -> bytes:
        replies.clear()
        transport = server.connect_memory(Catch())
        for chunk in chunks:
            transport.write(chunk)
        transport.close()
        return b"".join(replies)

    check()
