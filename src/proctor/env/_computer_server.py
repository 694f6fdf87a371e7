"""The computer/1 action server: one protocol in front of a desktop or a browser.

A connection carries requests as UTF-8 JSON objects, one per line (at most 64 MiB),
answered in order, one at a time (`docs/computer.md` has the whole protocol):

    {"id": 1, "op": "info"}                 -> {"id": 1, "result": {"width", "height", ...}}
    {"id": 2, "op": "screenshot", "frame"?: {"format", "quality", "scale"}}
    {"id": 3, "op": "batch", "actions": [...], "frame"?: {...} | false, "settle_ms"?: int}
    {"id": 4, "op": "cursor"}               -> {"id": 4, "result": {"x", "y"}}
    {"id": 5, "op": "subscribe", "interval_ms"?: int, "frame"?: {...}}   (live view only)

A reply carrying a frame says so in `result.frame` (`format`, `width`, `height`,
`bytes`) and is followed on the stream by exactly `bytes` bytes of the encoded image.
Errors are `{"id", "error": {"code", "message"}}`: -32602 a request or batch that breaks
the protocol (nothing of it ran), -32000 an action that failed while running, -32600 a
line over the limit (then the connection closes). A bad request never ends a connection.

An app redraws some time after the input that changed it, so a frame taken at once may
show the screen from before. `settle_ms` makes a batch wait, at most that long, for the
screen to change and then hold still for one poll (`SETTLE_POLL`) before its frame.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from typing import Any, ClassVar, Protocol

import orjson

from ._computer_actions import Action, FrameOptions, frame_options, validate_actions
from ._line_protocol import BAD_REQUEST, FAILED, MAX_LINE, TOO_LARGE, _LineError, read_request

__all__ = ["ComputerBackend", "serve_computer"]

log = logging.getLogger("proctor.env.computer")

MIN_INTERVAL_MS = 50
MAX_SETTLE_MS = 10_000
SETTLE_POLL = 0.03  # seconds between two looks at the screen while it settles


class ComputerBackend(Protocol):
    """What the action server drives: a screen of fixed size that takes actions."""

    width: int
    height: int
    kind: ClassVar[str]
    live_view: bool
    lock: asyncio.Lock

    def known_key(self, name: str) -> bool:
        """Whether `name` is a key this backend can press."""
        ...

    async def perform(self, actions: list[Action]) -> None:
        """Run validated actions in order."""
        ...

    async def frame(self, options: FrameOptions) -> tuple[bytes, int, int]:
        """The current screen encoded per `options`: (image bytes, width, height)."""
        ...

    async def cursor(self) -> tuple[int, int]:
        """The pointer position."""
        ...

    async def look(self) -> bytes:
        """A cheap picture of the screen, only ever compared with the last one."""
        ...


async def serve_computer(
    backend: ComputerBackend,
    reader: asyncio.StreamReader,
    writer: asyncio.StreamWriter,
    first: bytes = b"",
) -> None:
    """Serve one connection until EOF (`first`: the start of its first line, already read)."""
    try:
        while True:
            try:
                line = first + await reader.readuntil(b"\n")
            except asyncio.IncompleteReadError:
                return
            except asyncio.LimitOverrunError:
                _reply(writer, None, error=(TOO_LARGE, f"line over {MAX_LINE} bytes"))
                return
            first = b""
            if line.strip():
                await _answer(backend, line, writer)
                await writer.drain()
    except ConnectionError:
        return
    finally:
        writer.close()


async def _answer(backend: ComputerBackend, line: bytes, writer: asyncio.StreamWriter) -> None:
    rid: Any = None
    try:
        req = read_request(line)
        rid = req.get("id")
        op = req.get("op")
        if op == "subscribe":
            await _subscribe(backend, req, rid, writer)
            return
        result, image = await _run(backend, req, op)
    except _LineError as exc:
        _reply(writer, rid, error=(exc.code, str(exc)))
        return
    _reply(writer, rid, result, image)


_KEYS = {
    "info": {"id", "op"},
    "screenshot": {"id", "op", "frame"},
    "batch": {"id", "op", "actions", "frame", "settle_ms"},
    "cursor": {"id", "op"},
    "subscribe": {"id", "op", "frame", "interval_ms"},
}


async def _run(
    backend: ComputerBackend, req: dict[str, Any], op: Any
) -> tuple[dict[str, Any], bytes | None]:
    if op not in _KEYS:
        raise _LineError(BAD_REQUEST, f"op: {op!r} is not one of {', '.join(_KEYS)}")
    unknown = set(req) - _KEYS[op]
    if unknown:
        raise _LineError(BAD_REQUEST, f"{op}: unknown field {sorted(unknown)[0]!r}")
    if op == "info":
        return _info(backend), None
    if op == "cursor":
        x, y = await backend.cursor()
        return {"x": x, "y": y}, None
    try:
        options = None if req.get("frame") is False else frame_options(req.get("frame"))
        actions = (
            validate_actions(req.get("actions"), backend.width, backend.height, backend.known_key)
            if op == "batch"
            else []
        )
    except ValueError as exc:
        raise _LineError(BAD_REQUEST, str(exc)) from None
    settle = req.get("settle_ms", 0)
    if isinstance(settle, bool) or not isinstance(settle, int) or not 0 <= settle <= MAX_SETTLE_MS:
        raise _LineError(BAD_REQUEST, f"settle_ms: an integer in 0..{MAX_SETTLE_MS}")
    async with backend.lock:
        if actions:
            try:
                before = await backend.look() if settle and options is not None else None
                await backend.perform(actions)
                if before is not None:
                    await _settle(backend, before, settle / 1000)
            except Exception as exc:
                log.debug("computer action failed", exc_info=True)
                raise _LineError(FAILED, f"{op}: an action failed: {exc}") from None
        if options is None:
            return {"done": len(actions)}, None
        return await _framed(backend, options, {"done": len(actions)})


async def _settle(backend: ComputerBackend, before: bytes, limit: float) -> None:
    """Wait until the screen differs from `before` and then holds still for one poll, or
    `limit` seconds pass (an action that changes nothing waits the whole limit)."""
    loop = asyncio.get_running_loop()
    end = loop.time() + limit
    last, changed = before, False
    while loop.time() + SETTLE_POLL <= end:
        await asyncio.sleep(SETTLE_POLL)
        now = await backend.look()
        if changed and now == last:
            return
        changed = changed or now != before
        last = now


async def _framed(
    backend: ComputerBackend, options: FrameOptions, result: dict[str, Any]
) -> tuple[dict[str, Any], bytes]:
    try:
        image, width, height = await backend.frame(options)
        x, y = await backend.cursor()
    except Exception as exc:
        log.debug("computer frame failed", exc_info=True)
        raise _LineError(FAILED, f"frame: {exc}") from None
    meta = {"format": options.format, "width": width, "height": height, "bytes": len(image)}
    return {**result, "frame": meta, "cursor": {"x": x, "y": y}}, image


def _info(backend: ComputerBackend) -> dict[str, Any]:
    return {
        "protocol": "computer/1",
        "kind": backend.kind,
        "width": backend.width,
        "height": backend.height,
        "live_view": backend.live_view,
    }


async def _subscribe(
    backend: ComputerBackend, req: dict[str, Any], rid: Any, writer: asyncio.StreamWriter
) -> None:
    """Push a frame every `interval_ms` until the peer goes away (read-only)."""
    if not backend.live_view:
        raise _LineError(BAD_REQUEST, "subscribe: the live view is off for this capability")
    unknown = set(req) - _KEYS["subscribe"]
    if unknown:
        raise _LineError(BAD_REQUEST, f"subscribe: unknown field {sorted(unknown)[0]!r}")
    interval = req.get("interval_ms", 500)
    if type(interval) is not int or interval < MIN_INTERVAL_MS:
        raise _LineError(BAD_REQUEST, f"interval_ms: an integer >= {MIN_INTERVAL_MS}")
    try:
        options = frame_options(req.get("frame"))
    except ValueError as exc:
        raise _LineError(BAD_REQUEST, str(exc)) from None
    while not writer.is_closing():
        async with backend.lock:
            result, image = await _framed(backend, options, {})
        _reply(writer, rid, result, image)
        await writer.drain()
        await asyncio.sleep(interval / 1000)


def _reply(
    writer: asyncio.StreamWriter,
    rid: Any,
    result: dict[str, Any] | None = None,
    image: bytes | None = None,
    *,
    error: tuple[int, str] | None = None,
) -> None:
    if error is not None:
        body: dict[str, Any] = {"id": rid, "error": {"code": error[0], "message": error[1]}}
    else:
        body = {"id": rid, "result": result}
    with contextlib.suppress(TypeError):  # an id that is no JSON value is answered as null
        writer.write(orjson.dumps(body) + b"\n")
        if image is not None:
            writer.write(image)
        return
    writer.write(orjson.dumps({**body, "id": None}) + b"\n")
    if image is not None:
        writer.write(image)
