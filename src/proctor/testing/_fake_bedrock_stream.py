"""ConverseStream as the fake Bedrock speaks it: `application/vnd.amazon.eventstream`
messages (a prelude with lengths and its CRC32, typed headers, a JSON payload, the
message's CRC32), one per event."""

from __future__ import annotations

import struct
import zlib
from typing import Any

import orjson

from ._fake_bedrock_converse import STOP_REASONS, converse_usage
from ._fake_model_turn import Turn

__all__ = ["EVENTSTREAM", "converse_events", "eventstream_message"]

EVENTSTREAM = "application/vnd.amazon.eventstream"
_STRING = 7  # the header value type of a string


def eventstream_message(headers: dict[str, str], payload: bytes) -> bytes:
    """One event stream message (string headers only, as Bedrock's events have)."""
    encoded = b"".join(
        bytes([len(k)]) + k.encode() + bytes([_STRING]) + struct.pack(">H", len(v)) + v.encode()
        for k, v in headers.items()
    )
    prelude = struct.pack(">II", 12 + len(encoded) + len(payload) + 4, len(encoded))
    message = prelude + struct.pack(">I", zlib.crc32(prelude)) + encoded + payload
    return message + struct.pack(">I", zlib.crc32(message))


def _event(kind: str, payload: dict[str, Any]) -> bytes:
    headers = {":event-type": kind, ":content-type": "application/json", ":message-type": "event"}
    return eventstream_message(headers, orjson.dumps(payload))


def converse_events(turn: Turn, *, missing_calls: bool = False) -> list[bytes]:
    """`turn` as ConverseStream events: messageStart, each content block (text in its
    tokens, a tool use's input as one JSON delta), messageStop, metadata with usage."""
    events = [_event("messageStart", {"role": "assistant"})]
    index = 0
    if turn.reasoning:
        thought = {"reasoningContent": {"text": turn.reasoning}}
        events.append(_event("contentBlockDelta", {"contentBlockIndex": index, "delta": thought}))
        events.append(_event("contentBlockStop", {"contentBlockIndex": index}))
        index += 1
    if turn.text:
        for piece in turn.tokens:
            delta = {"text": piece}
            events.append(_event("contentBlockDelta", {"contentBlockIndex": index, "delta": delta}))
        events.append(_event("contentBlockStop", {"contentBlockIndex": index}))
        index += 1
    for call in () if missing_calls else turn.calls:
        start = {"toolUse": {"toolUseId": call.call_id, "name": call.name}}
        events.append(_event("contentBlockStart", {"contentBlockIndex": index, "start": start}))
        use = {"toolUse": {"input": call.arguments or "{}"}}
        events.append(_event("contentBlockDelta", {"contentBlockIndex": index, "delta": use}))
        events.append(_event("contentBlockStop", {"contentBlockIndex": index}))
        index += 1
    stop = "tool_use" if missing_calls else STOP_REASONS.get(turn.finish, turn.finish)
    events.append(_event("messageStop", {"stopReason": stop}))
    metadata = {"usage": converse_usage(turn), "metrics": {"latencyMs": 1}}
    events.append(_event("metadata", metadata))
    return events
