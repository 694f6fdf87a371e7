"""Server-sent events (text/event-stream): an incremental parser and a formatter.

The parser follows the WHATWG HTML "event stream interpretation": lines end in CRLF, LF
or CR (a CRLF split across two feeds is one line end), a leading BOM is dropped, `:`
starts a comment, a blank line dispatches the event if it has data, and the last event
id persists across events until a new `id` field changes it.
"""

from __future__ import annotations

from dataclasses import dataclass

__all__ = ["SSEEvent", "SSEParser", "format_sse"]

_BOM = b"\xef\xbb\xbf"


@dataclass(slots=True, frozen=True)
class SSEEvent:
    """One dispatched event; `event` is None when the stream named no type."""

    event: str | None
    data: str
    id: str | None = None


class SSEParser:
    """Feed bytes as they arrive; get back the events they complete.

    `retry` holds the last valid reconnection time the stream asked for, in ms.
    """

    __slots__ = ("_after_cr", "_data", "_event", "_id", "_partial", "_started", "retry")

    def __init__(self) -> None:
        # The unfinished last line, as the pieces it came in: joined once its line end
        # arrives, so a long line fed in small pieces costs linear time, not quadratic.
        self._partial: list[bytes] = []
        self._after_cr = False
        self._started = False
        self._data: list[str] = []
        self._event: str | None = None
        self._id: str | None = None
        self.retry: int | None = None

    def feed(self, data: bytes) -> list[SSEEvent]:
        """Parse `data`; returns the events completed by it, in order."""
        if self._after_cr and data[:1] == b"\n":
            data = data[1:]
        if not data:
            return []
        self._after_cr = data[-1:] == b"\r"
        if not self._started:
            if self._partial:  # the first bytes of a BOM, at most two
                data = self._partial.pop() + data
            if len(data) < 3 and _BOM.startswith(data):
                self._partial.append(data)
                return []
            self._started = True
            if data.startswith(_BOM):
                data = data[3:]
        if b"\r" in data:
            data = data.replace(b"\r\n", b"\n").replace(b"\r", b"\n")
        if b"\n" not in data:
            if data:
                self._partial.append(data)
            return []
        lines = data.split(b"\n")
        if self._partial:
            self._partial.append(lines[0])
            lines[0] = b"".join(self._partial)
        tail = lines.pop()
        self._partial = [tail] if tail else []
        events: list[SSEEvent] = []
        for line in lines:
            if line:
                self._field(line.decode("utf-8", "replace"))
            elif self._data:
                events.append(SSEEvent(self._event or None, "\n".join(self._data), self._id))
                self._data = []
                self._event = None
            else:
                self._event = None
        return events

    def _field(self, line: str) -> None:
        name, colon, value = line.partition(":")
        if not name:
            return  # a comment
        if colon and value[:1] == " ":
            value = value[1:]
        if name == "data":
            self._data.append(value)
        elif name == "event":
            self._event = value
        elif name == "id":
            if "\x00" not in value:
                self._id = value
        elif name == "retry" and value.isascii() and value.isdigit():
            self.retry = int(value)


def format_sse(data: str | bytes, event: str | None = None, id: str | None = None) -> bytes:
    """One event in text/event-stream form; multi-line data becomes several `data:` lines.

    Raises:
        ValueError: `event` or `id` holds a line break.
    """
    raw = data.encode() if isinstance(data, str) else data
    if b"\r" in raw:
        raw = raw.replace(b"\r\n", b"\n").replace(b"\r", b"\n")
    out = b"data: " + raw.replace(b"\n", b"\ndata: ") + b"\n\n"
    for name, value in (("id", id), ("event", event)):
        if value is not None:
            if "\r" in value or "\n" in value:
                raise ValueError(f"line break in the SSE {name}")
            out = f"{name}: {value}\n".encode() + out
    return out
