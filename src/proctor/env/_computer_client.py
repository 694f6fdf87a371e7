"""`DesktopClient`: drive a desktop or browser capability over protocol computer/1."""

from __future__ import annotations

import asyncio
import itertools
from collections.abc import AsyncGenerator, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import orjson

from .._errors import ConnectionLost, ProtocolError
from .._urls import host_port, unix_path
from ._line_protocol import MAX_LINE, read_reply

__all__ = ["DesktopClient", "Frame"]


@dataclass(frozen=True, slots=True)
class Frame:
    """One encoded screen image and where the pointer was when it was taken."""

    data: bytes
    format: str
    width: int
    height: int
    cursor: tuple[int, int]

    def __repr__(self) -> str:
        return f"<Frame {self.format} {self.width}x{self.height} {len(self.data)} bytes>"


class DesktopClient:
    """A client of a `desktop` or `browser` capability (`run.binding(name).url`).

    One connection, opened on first use; requests go one at a time, in order. Actions
    are dicts as in `docs/computer.md` (`{"type": "click", "x": 10, "y": 20}`).

    Args:
        url: `unix:///path`, `http+unix://...` or a TCP-style URL of the capability.
        format: default frame format, `png` or `jpeg`.
        quality: default JPEG quality (1-95).
        scale: default frame scale (0.05-1).

    Raises:
        ValueError: `url` names neither a socket path nor a host:port.
    """

    def __init__(
        self, url: str, *, format: str = "png", quality: int = 80, scale: float = 1.0
    ) -> None:
        self.url = url
        self._path = unix_path(url)
        self._address = host_port(url) if self._path is None else None
        self.frame_options = {"format": format, "quality": quality, "scale": scale}
        self._ids = itertools.count(1)
        self._lock = asyncio.Lock()
        self._stream: tuple[asyncio.StreamReader, asyncio.StreamWriter] | None = None

    def __repr__(self) -> str:
        return f"DesktopClient({self.url!r})"

    async def info(self) -> dict[str, Any]:
        """The screen: `protocol`, `kind` (desktop or browser), `width`, `height`, `live_view`.

        Raises:
            OSError: the capability could not be reached.
            ConnectionLost: the connection closed before the reply.
            RemoteError: the server refused the request.
            ProtocolError: the reply is malformed.
        """
        result, _ = await self._call({"op": "info"})
        return result

    async def screenshot(self, **frame: Any) -> Frame:
        """The current screen (`format=`, `quality=`, `scale=` override the defaults).

        Raises:
            OSError, ConnectionLost, RemoteError, ProtocolError: as for `info`.
        """
        _, image = await self._call({"op": "screenshot", "frame": self._frame(frame)})
        assert image is not None
        return image

    async def act(
        self,
        actions: Sequence[Mapping[str, Any]],
        *,
        frame: bool = True,
        settle_ms: int = 0,
        **options: Any,
    ) -> Frame | None:
        """Run a batch of actions in order; the frame after the last one (None if not asked).

        The whole batch is validated before any action runs. `settle_ms`: wait at most
        that long for the screen to change and hold still before the frame is taken (an
        app redraws some time after the input that changed it).

        Raises:
            RemoteError: code -32602 when the batch breaks the protocol (nothing ran),
                -32000 when an action failed while running.
            OSError, ConnectionLost, ProtocolError: as for `info`.
        """
        req: dict[str, Any] = {"op": "batch", "actions": [dict(a) for a in actions]}
        req["frame"] = self._frame(options) if frame else False
        if settle_ms:
            req["settle_ms"] = settle_ms
        _, image = await self._call(req)
        return image

    async def cursor(self) -> tuple[int, int]:
        """The pointer position.

        Raises:
            OSError, ConnectionLost, RemoteError, ProtocolError: as for `info`.
        """
        result, _ = await self._call({"op": "cursor"})
        return int(result["x"]), int(result["y"])

    async def frames(self, interval_ms: int = 500, **frame: Any) -> AsyncGenerator[Frame, None]:
        """A live stream of frames on a connection of its own (the capability must allow
        the live view). Stop iterating to close it.

        Raises:
            RemoteError: the live view is off, or a bad interval.
            OSError, ConnectionLost, ProtocolError: as for `info`.
        """
        reader, writer = await self._connect()
        try:
            req = {
                "id": 1,
                "op": "subscribe",
                "interval_ms": interval_ms,
                "frame": self._frame(frame),
            }
            writer.write(orjson.dumps(req) + b"\n")
            while True:
                _, image = await self._read(reader)
                assert image is not None
                yield image
        finally:
            writer.close()

    async def aclose(self) -> None:
        """Close the connection (idempotent)."""
        stream, self._stream = self._stream, None
        if stream is not None:
            stream[1].close()

    async def __aenter__(self) -> DesktopClient:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.aclose()

    # -- internals -------------------------------------------------------------------------

    def _frame(self, overrides: Mapping[str, Any]) -> dict[str, Any]:
        return {**self.frame_options, **overrides}

    async def _connect(self) -> tuple[asyncio.StreamReader, asyncio.StreamWriter]:
        if self._address is not None:
            return await asyncio.open_connection(*self._address, limit=MAX_LINE)
        assert self._path is not None
        return await asyncio.open_unix_connection(self._path, limit=MAX_LINE)

    async def _call(self, req: dict[str, Any]) -> tuple[dict[str, Any], Frame | None]:
        async with self._lock:
            if self._stream is None:
                self._stream = await self._connect()
            reader, writer = self._stream
            req["id"] = next(self._ids)
            try:
                writer.write(orjson.dumps(req) + b"\n")
                return await self._read(reader)
            except BaseException:
                # A reply half read (or a cancelled wait) leaves the stream out of step.
                await self.aclose()
                raise

    async def _read(self, reader: asyncio.StreamReader) -> tuple[dict[str, Any], Frame | None]:
        line = await reader.readline()
        if not line.endswith(b"\n"):
            raise ConnectionLost(f"{self.url}: connection closed before the reply")
        result = read_reply(line, f"{self.url}: reply").get("result")
        if not isinstance(result, dict):
            raise ProtocolError(f"{self.url}: reply has no result object")
        meta = result.get("frame")
        if not isinstance(meta, dict):
            return result, None
        try:
            data = await reader.readexactly(int(meta["bytes"]))
            cursor = result.get("cursor") or {"x": 0, "y": 0}
            frame = Frame(
                data,
                str(meta["format"]),
                int(meta["width"]),
                int(meta["height"]),
                (int(cursor["x"]), int(cursor["y"])),
            )
        except asyncio.IncompleteReadError:
            raise ConnectionLost(f"{self.url}: connection closed inside a frame") from None
        except (KeyError, TypeError, ValueError) as exc:
            raise ProtocolError(f"{self.url}: malformed frame header: {exc!r}") from None
        return result, frame
