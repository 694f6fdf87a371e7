"""Share one Chrome DevTools pipe (`--remote-debugging-pipe`) between several clients.

Chromium speaks CDP on fds 3 (in) and 4 (out), messages ending in a NUL byte, as one
connection. `CdpMux` gives each client its own id space (ids are rewritten on the way
in and restored on the way out) and routes session traffic to the client that owns the
session: the one whose `Target.attachToTarget` made it, else (auto-attach, targets it
discovered) every client speaking for the whole browser. A pipe needs no port, so no
other user can reach the browser.

Chromium sees one connection, so it attaches a target once and announces it once: when
a client leaves, the sessions it owned are detached, and once no client that turned
on browser-level auto-attach is left, auto-attach is turned off and the sessions it
made are detached too, so the next client is told of every page again.
"""

from __future__ import annotations

import asyncio
import itertools
from typing import Any, Protocol

import orjson

from .._errors import CdpError

__all__ = ["CdpClient", "CdpError", "CdpMux", "InternalClient"]

MAX_MESSAGE = 256 * 1024 * 1024


class CdpClient(Protocol):
    """One party on the shared pipe."""

    broadcast: bool  # receives browser-level events and auto-attached sessions

    def deliver(self, message: dict[str, Any]) -> None:
        """Take one message from chromium (its id already restored)."""
        ...


class CdpMux(asyncio.Protocol):
    """The reading end of chromium's output pipe, and the router of its messages."""

    def __init__(self) -> None:
        self.clients: set[CdpClient] = set()
        self._out: asyncio.WriteTransport | None = None
        self._buffer = bytearray()
        self._ids = itertools.count(1)
        self._pending: dict[int, tuple[CdpClient, Any]] = {}
        self._owners: dict[str, CdpClient | None] = {}  # sessionId -> owner (None: broadcast)
        self._attaching: dict[str, CdpClient] = {}  # targetId -> who asked to attach
        self._auto: set[CdpClient] = set()  # clients that turned browser auto-attach on
        self.closed = asyncio.get_running_loop().create_future()

    def attach_output(self, transport: asyncio.WriteTransport) -> None:
        """The writing end of chromium's input pipe."""
        self._out = transport

    def send(self, client: CdpClient, message: dict[str, Any]) -> None:
        """Forward a client's command, under an id of the pipe's own."""
        if self._out is None or self._out.is_closing():
            raise CdpError("the browser is gone")
        gid = next(self._ids)
        self._pending[gid] = (client, message.get("id"))
        method, params = message.get("method"), message.get("params") or {}
        if method == "Target.attachToTarget":
            target = params.get("targetId")
            if isinstance(target, str):
                self._attaching[target] = client
        elif method == "Target.setAutoAttach" and "sessionId" not in message:
            if params.get("autoAttach"):
                self._auto.add(client)
            else:
                self._auto.discard(client)
        self._out.write(orjson.dumps({**message, "id": gid}) + b"\0")

    def forget(self, client: CdpClient) -> None:
        """A client left: drop what is routed to it and detach the sessions it made."""
        self.clients.discard(client)
        self._pending = {k: v for k, v in self._pending.items() if v[0] is not client}
        gone = [sid for sid, owner in self._owners.items() if owner is client]
        if client in self._auto:
            self._auto.discard(client)
            if not self._auto:  # nobody wants auto-attached sessions any more
                off = {"autoAttach": False, "waitForDebuggerOnStart": False, "flatten": True}
                self._quietly("Target.setAutoAttach", off)
                gone += [sid for sid, owner in self._owners.items() if owner is None]
        for sid in gone:
            del self._owners[sid]
            self._quietly("Target.detachFromTarget", {"sessionId": sid})

    def _quietly(self, method: str, params: dict[str, Any]) -> None:
        """Send a command of the bridge's own, whose answer goes nowhere."""
        if self._out is not None and not self._out.is_closing():
            self._out.write(
                orjson.dumps({"id": next(self._ids), "method": method, "params": params}) + b"\0"
            )

    # -- asyncio.Protocol --------------------------------------------------------------------

    def data_received(self, data: bytes) -> None:
        self._buffer += data
        while (end := self._buffer.find(b"\0")) >= 0:
            raw = bytes(self._buffer[:end])
            del self._buffer[: end + 1]
            self._route(orjson.loads(raw))
        if len(self._buffer) > MAX_MESSAGE:
            self._buffer.clear()

    def connection_lost(self, exc: Exception | None) -> None:
        if not self.closed.done():
            self.closed.set_result(None)

    # -- routing -------------------------------------------------------------------------------

    def _route(self, message: dict[str, Any]) -> None:
        gid = message.get("id")
        if gid is not None:
            found = self._pending.pop(gid, None)
            if found is not None:
                client, cid = found
                sid = (message.get("result") or {}).get("sessionId")
                if isinstance(sid, str):
                    self._owners[sid] = client
                client.deliver({**message, "id": cid})
            return
        params = message.get("params") or {}
        parent = message.get("sessionId")
        owner = self._owners.get(parent) if isinstance(parent, str) else None
        if message.get("method") == "Target.attachedToTarget":
            target = (params.get("targetInfo") or {}).get("targetId")
            owner = self._attaching.pop(str(target), None) or owner
            self._owners[str(params.get("sessionId", ""))] = owner
        elif message.get("method") == "Target.detachedFromTarget":
            self._owners.pop(str(params.get("sessionId", "")), None)
        if owner is not None:
            owner.deliver(message)
            return
        for client in list(self.clients):
            if client.broadcast:
                client.deliver(message)


class InternalClient:
    """Proctor's own CDP party on the pipe: `await call(method, params, session=)`."""

    broadcast = False

    def __init__(self, mux: CdpMux) -> None:
        self.mux = mux
        self._ids = itertools.count(1)
        self._waiting: dict[int, asyncio.Future[dict[str, Any]]] = {}
        self.detached: set[str] = set()
        self._expected: dict[tuple[str, str], asyncio.Future[dict[str, Any]]] = {}
        mux.clients.add(self)

    def deliver(self, message: dict[str, Any]) -> None:
        future = self._waiting.pop(message.get("id", -1), None)
        if future is not None and not future.done():
            future.set_result(message)
            return
        method = message.get("method", "")
        if method == "Target.detachedFromTarget":
            self.detached.add((message.get("params") or {}).get("sessionId", ""))
        event = self._expected.pop((method, message.get("sessionId", "")), None)
        if event is not None and not event.done():
            event.set_result(message.get("params") or {})

    def expect(self, method: str, session: str) -> asyncio.Future[dict[str, Any]]:
        """A future of the next `method` event on `session` (its params)."""
        future: asyncio.Future[dict[str, Any]] = asyncio.get_running_loop().create_future()
        self._expected[(method, session)] = future
        return future

    async def call(
        self, method: str, params: dict[str, Any] | None = None, *, session: str | None = None
    ) -> dict[str, Any]:
        """Send a command and return its result.

        Raises:
            CdpError: chromium answered with an error, or went away first.
        """
        cid = next(self._ids)
        message: dict[str, Any] = {"id": cid, "method": method, "params": params or {}}
        if session is not None:
            message["sessionId"] = session
        future = asyncio.get_running_loop().create_future()
        self._waiting[cid] = future
        try:
            self.mux.send(self, message)
            done, _ = await asyncio.wait(
                {future, self.mux.closed}, return_when=asyncio.FIRST_COMPLETED
            )
            if future not in done:
                raise CdpError(f"{method}: the browser went away")
        finally:
            self._waiting.pop(cid, None)
        reply = future.result()
        if "error" in reply:
            raise CdpError(f"{method}: {reply['error'].get('message', reply['error'])}")
        result: dict[str, Any] = reply.get("result") or {}
        return result
