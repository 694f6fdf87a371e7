"""The client's side of `tunnel.open`: a capability's bytes over a control connection."""

from __future__ import annotations

import asyncio
from typing import Any
from urllib.parse import urlsplit, urlunsplit

from .._errors import ProtocolError
from ._framing import LineBuffer, decode
from ._messages import request_frame
from ._splice import Pipe

__all__ = ["TunnelClient", "tcp_route"]


class TunnelClient(Pipe):
    """Our side of a `tunnel.open` stream: preface, one reply frame, then raw bytes."""

    def __init__(self, name: str, token: str | None, local: Pipe) -> None:
        super().__init__()
        self.name = name
        self.token = token
        self.local = local
        self.buffer: LineBuffer | None = LineBuffer()

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        super().connection_made(transport)
        params: dict[str, Any] = {"capability": self.name}
        if self.token is not None:
            params["token"] = self.token
        assert self.transport is not None
        self.transport.write(request_frame(1, "tunnel.open", params))

    def data_received(self, data: bytes) -> None:
        if self.buffer is None:
            super().data_received(data)
            return
        try:
            frame, rest = self.buffer.feed_first(data)
            if frame is None:
                return
            reply = decode(frame)
        except ProtocolError:
            reply = None
        self.buffer = None
        assert self.transport is not None and self.local.transport is not None
        refused = not (isinstance(reply, dict) and "result" in reply)
        if refused or self.local.transport.is_closing():  # or our local client left meanwhile
            self.transport.close()
            self.local.transport.close()
            return
        if rest:
            self.local.transport.write(rest)
        self.attach(self.local.transport)
        self.local.attach(self.transport)

    def connection_lost(self, exc: Exception | None) -> None:
        if self.local.transport is not None:
            self.local.transport.close()


def tcp_route(url: str, port: int) -> str:
    """`url` (TCP-style) with its host:port replaced by 127.0.0.1:`port`."""
    parts = urlsplit(url if "://" in url else f"tcp://{url}")
    user = f"{parts.username}@" if parts.username else ""
    netloc = f"{user}127.0.0.1:{port}"
    return urlunsplit((parts.scheme or "tcp", netloc, parts.path, parts.query, parts.fragment))
