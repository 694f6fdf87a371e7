"""The control channel client: `connect`, `EnvClient` calls, lazy capability forwarders.

A client of an in-process `EnvServer` holds its session directly (`_ends._LocalLink`): each
call runs the session's method in the caller's task, its params and result crossing
JSON as over a socket, with no frames, transport or task in between.
"""

from __future__ import annotations

import asyncio
import collections
import contextlib
import logging
import os
import shutil
import socket
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from .._errors import (
    ChannelClosed,
    ChannelError,
    ConnectionLost,
    ConnectTimeout,
    FrameTooLarge,
    ProtocolError,
    RemoteError,
    TaskCancelled,
)
from .._peer import loopback_peer_uid
from .._resource import AsyncResource
from .._tempdirs import owned_tempdir
from .._urls import unix_path, with_unix_path
from ..env import Capability
from ._ends import TURN, Dialer, _ClientProtocol, _LocalEnd, _LocalLink, dialer_for
from ._framing import MAX_FRAME, ParseError, decode, encode
from ._messages import INTERRUPTED, INVALID_REQUEST, request_frame
from ._session import _REPLY_ENVELOPE, DirectCall, _Refusal, _Session
from ._splice import Pipe
from ._tunnel import TunnelClient, tcp_route

if TYPE_CHECKING:
    from ._server import EnvServer

__all__ = ["Dialer", "EnvClient", "Manifest", "connect", "dialer_for"]

_log = logging.getLogger(__name__)


@dataclass(frozen=True, slots=True)
class Manifest:
    """What `hello` told us: the session and the environment's capabilities."""

    session_id: str
    env_name: str
    env_version: str
    bindings: list[Capability] = field(default_factory=list)
    resume_token: str | None = field(default=None, repr=False)
    """The secret that resumes this session later (None from a HUD server)."""


class EnvClient(AsyncResource):
    """One control session with an environment server.

    Calls are serialized (one request in flight); `cancel` and `bye` may overtake a
    running `tasks.start` / `tasks.grade` to interrupt it. Use `connect()` to make one.
    """

    def __init__(self, dial: Dialer, url: str, *, token: str | None = None) -> None:
        self.url = url
        self._manifest: Manifest | None = None
        self._session: _Session | None = None  # an in-process server's session, held directly
        self._link: _LocalLink | None = None
        self._dial = dial
        self._token = token
        self._transport: asyncio.Transport | None = None
        self._pending: dict[int, asyncio.Future[dict[str, Any]]] = {}
        self._abandoned: set[int] = set()
        self._next_id = 0
        self._busy = False  # a call holds the turn (calls are served one at a time, in order)
        self._queue: collections.deque[asyncio.Future[None]] | None = None  # waiting turns
        self._lost: Exception | None = None
        self._closed = False
        self._forwarders: dict[str, tuple[Capability, asyncio.Task[asyncio.Server]]] = {}
        self._socket_dir: str | None = None
        self._refused_uids: set[int | None] = set()
        self._tunnels: set[asyncio.Task[Any]] = set()
        self._locals: set[_LocalEnd] = set()
        self._watchers: list[Callable[[Exception], None]] = []

    async def _open(self) -> None:
        self._transport = await self._dial(lambda: _ClientProtocol(self))

    def _attach(self, server: EnvServer) -> None:
        """Open a session on an in-process server, held directly (no connection).

        Raises:
            ConnectionRefusedError: the server is closed.
            RemoteError: the server refused the token.
        """
        link = _LocalLink(self, server)
        try:
            link.session = self._session = server.open_session(link, self._token)
        except _Refusal as exc:
            refused = (exc.code, exc.message, exc.data)
        else:
            return
        link.client = None  # no cycle left behind by a refused client
        raise _refused(*refused)

    @property
    def manifest(self) -> Manifest | None:
        """What `hello` told us (None before it); an in-process client asks its
        session on first use."""
        link = self._link
        if self._manifest is None and link is not None and link.session is not None:
            result = decode(encode(link.session.hello(None, {})))
            self._manifest = self._manifest_of(result)
        return self._manifest

    # -- calls ----------------------------------------------------------------------

    async def hello(
        self, session_id: str | None = None, resume_token: str | None = None
    ) -> Manifest:
        """Say hello (or resume a parked session with its resume token) and read the manifest."""
        params: dict[str, Any] = {}
        if session_id is not None:
            params["session_id"] = session_id
        if resume_token is not None:
            params["resume_token"] = resume_token
        if self._token is not None:
            params["token"] = self._token
        result = self._object("hello", await self.call("hello", params))
        self._manifest = manifest = self._manifest_of(result)
        return manifest

    def _manifest_of(self, result: dict[str, Any]) -> Manifest:
        try:
            env = result.get("env") or {}
            return Manifest(
                session_id=str(result["session_id"]),
                resume_token=_optional_str(result.get("resume_token")),
                env_name=str(env.get("name", "")),
                env_version=str(env.get("version", "")),
                bindings=[Capability.from_manifest(b) for b in result.get("bindings") or ()],
            )
        except (KeyError, TypeError, AttributeError) as exc:
            raise ProtocolError(f"{self.url}: malformed hello result: {exc!r}") from None

    async def list_tasks(self) -> list[dict[str, Any]]:
        """The environment's templates: `[{id, description, args, returns?}]`."""
        tasks = self._object("tasks.list", await self.call("tasks.list", {})).get("tasks")
        if not isinstance(tasks, list):
            raise ProtocolError(f"{self.url}: tasks.list result has no list of tasks")
        return tasks

    async def start_task(
        self, task_id: str, args: dict[str, Any] | None = None, **extra: Any
    ) -> dict[str, Any]:
        """Run a task to its first yield; returns `{prompt, ...}`. `extra` are further
        params (`user`: the run's user model endpoint)."""
        params = {"id": task_id, "args": args or {}, **extra}
        return self._object("tasks.start", await self.call("tasks.start", params))

    async def grade(self, answer: Any = None, **extra: Any) -> dict[str, Any]:
        """Send the answer and return the evaluation `{score, ...}`."""
        result = await self.call("tasks.grade", {"answer": answer, **extra})
        return self._object("tasks.grade", result)

    async def solve(self) -> Any:
        """Run the task's reference solution in the substrate (`tasks.solve`); its answer.

        The task stays in progress: `grade(answer)` comes next.
        """
        result = self._object("tasks.solve", await self.call("tasks.solve", {}))
        if "answer" not in result:
            raise ProtocolError(f"{self.url}: tasks.solve result has no answer")
        return result["answer"]

    async def cancel(self) -> bool:
        """Cancel this session's task (interrupting a running start/grade)."""
        result = await self.call("tasks.cancel", {}, overtake=True)
        return bool(self._object("tasks.cancel", result).get("cancelled"))

    async def bye(self) -> None:
        """End the session: the server cancels the task and closes the connection."""
        await self.call("bye", {}, overtake=True)

    async def call(self, method: str, params: dict[str, Any], *, overtake: bool = False) -> Any:
        """Send one request and return its result.

        Raises:
            RemoteError: the server answered an error (`TaskCancelled` if interrupted).
            ConnectionLost: the connection broke before the reply.
            ChannelClosed: this client was closed.
            ProtocolError: the reply was malformed or its id did not match.
        """
        if self._session is not None:
            if not overtake:
                if self._busy:
                    await self._wait_turn()
                self._busy = True
            try:
                session, line, size = self._here(method, params)
                data = await session.direct(method, decode(line), size)
                if len(data) + _REPLY_ENVELOPE > MAX_FRAME + 1:
                    large = FrameTooLarge(f"frame exceeds {MAX_FRAME} bytes", [])
                    self._fail(large)
                    raise large
                return decode(data)
            except _Refusal as exc:
                refused = (exc.code, exc.message, exc.data)
            finally:
                if not overtake:
                    self._next_turn()
            raise _refused(*refused)
        if overtake:
            msg = await self._roundtrip(method, params)
        else:
            if self._busy:
                await self._wait_turn()
            self._busy = True
            try:
                msg = await self._roundtrip(method, params)
            finally:
                self._next_turn()
        if "error" in msg:
            raise _remote_error(msg["error"])
        if "result" not in msg:
            raise ProtocolError(f"{self.url}: {method} reply has neither result nor error")
        return msg["result"]

    async def _wait_turn(self) -> None:
        """Wait until the calls before ours are done; ours holds the turn then."""
        fut = asyncio.get_running_loop().create_future()
        if self._queue is None:
            self._queue = collections.deque()
        self._queue.append(fut)
        try:
            await fut
        except asyncio.CancelledError:
            if fut.done() and not fut.cancelled():  # handed the turn as we were cancelled
                self._next_turn()
            else:
                with contextlib.suppress(ValueError):
                    self._queue.remove(fut)
            raise

    def _next_turn(self) -> None:
        """Pass the turn to the next waiting call, if any."""
        queue = self._queue
        while queue:
            fut = queue.popleft()
            if not fut.done():
                fut.set_result(None)
                return
        self._busy = False

    def _object(self, method: str, result: Any) -> dict[str, Any]:
        """`method`'s result, which must be an object."""
        if not isinstance(result, dict):
            raise ProtocolError(f"{self.url}: {method} result is not an object: {result!r:.80}")
        return result

    def _here(self, method: str, params: dict[str, Any]) -> tuple[_Session, bytes, int]:
        """A call on the held session: the session, the params' JSON and the request
        frame's size (params and result cross JSON, and its frame limit, as they would
        on a socket).

        Raises:
            ChannelClosed, ConnectionLost: no session to call.
            RemoteError: the request frame is too large (the connection is lost).
        """
        if self._closed:
            raise ChannelClosed(f"{method}: client is closed")
        session = self._session
        if self._lost is not None or session is None:
            raise ConnectionLost(f"{method}: connection to {self.url} is lost")
        line = encode(params)
        size = len(line) + len(method) + _REQUEST_ENVELOPE
        if size > MAX_FRAME + 1:  # the server refuses the frame and hangs up
            lost = RemoteError(INVALID_REQUEST, f"frame exceeds {MAX_FRAME} bytes")
            self._fail(lost)
            raise lost
        return session, line, size

    async def _roundtrip(self, method: str, params: dict[str, Any]) -> dict[str, Any]:
        if self._closed:
            raise ChannelClosed(f"{method}: client is closed")
        if self._lost is not None or self._transport is None:
            raise ConnectionLost(f"{method}: connection to {self.url} is lost")
        self._next_id += 1
        rid = self._next_id
        frame = request_frame(rid, method, params)  # params that are not JSON: nothing pends
        fut: asyncio.Future[dict[str, Any]] = asyncio.get_running_loop().create_future()
        self._pending[rid] = fut
        self._transport.write(frame)
        try:
            return await fut
        except asyncio.CancelledError:
            # Our caller gave up (which cancels `fut` too): the reply may still come.
            if fut.cancelled() or not fut.done():
                self._abandoned.add(rid)
            raise
        finally:
            self._pending.pop(rid, None)

    # -- incoming ----------------------------------------------------------------------

    def _on_frame(self, line: bytes) -> None:
        try:
            msg = decode(line)
        except ParseError as exc:
            self._fail(ProtocolError(f"{self.url}: server sent invalid JSON: {exc}"))
            return
        rid: Any = msg.get("id") if isinstance(msg, dict) else None
        ours = type(rid) is int  # our ids; not True, which would equal 1
        fut = self._pending.get(rid) if ours else None
        if fut is not None:
            if not fut.done():
                fut.set_result(msg)
        elif ours and rid in self._abandoned:
            self._abandoned.discard(rid)
        elif rid is None and isinstance(msg, dict) and "error" in msg:
            self._fail(_remote_error(msg["error"]))
        else:
            self._fail(ProtocolError(f"{self.url}: reply id {rid!r} matches no request"))

    def on_lost(self, callback: Callable[[Exception], None]) -> Callable[[], None]:
        """Have `callback(error)` called once when the connection breaks (not when this
        client is closed), at once if it already has; returns what unregisters it."""
        if self._closed:
            return lambda: None
        if self._lost is not None:
            callback(self._lost)
            return lambda: None
        self._watchers.append(callback)
        return lambda: self._watchers.remove(callback) if callback in self._watchers else None

    def _fail(self, exc: Exception) -> None:
        if self._lost is None:
            self._lost = exc
            watchers, self._watchers = self._watchers, []
            for callback in [] if self._closed else watchers:
                callback(exc)
        for fut in self._pending.values():
            if not fut.done():
                fut.set_exception(exc)
        if self._transport is not None:
            # Dropped once lost, so the transport and its protocol (which points back
            # here) leave no reference cycle behind.
            transport, self._transport = self._transport, None
            transport.close()
        self._interrupt(exc)

    def _interrupt(self, exc: Exception) -> None:
        """End a call running on the held session in another task with `exc`."""
        call = None if self._session is None else self._session.call
        if isinstance(call, DirectCall) and call.task is not asyncio.current_task():
            call.interrupt(exc)

    # -- capabilities ----------------------------------------------------------------------

    def binding(self, name: str) -> Capability:
        """The capability `name` with its URL routed through this connection.

        The first call opens a local forwarder (see `route`); each connection to it
        becomes a `tunnel.open` stream to the server, so the capability is reachable
        even when its own address is not.

        Raises:
            KeyError: no such binding (say hello first).
            ChannelClosed: this client was closed.
        """
        if name in self._forwarders:
            return self.route(self._forwarders[name][0])
        if self.manifest is None:
            raise KeyError(f"{name!r}: no manifest yet; call hello() first")
        cap = next((b for b in self.manifest.bindings if b.name == name), None)
        if cap is None:
            known = ", ".join(b.name for b in self.manifest.bindings) or "none"
            raise KeyError(f"no binding {name!r} (have: {known})")
        return self.route(cap)

    def route(self, cap: Capability) -> Capability:
        """Forward a capability through this connection, by name (`binding()` uses this).

        A Unix-socket capability (`unix://`, `http+unix://`) is forwarded on a Unix
        socket in a private (0700) directory of this process, removed by `aclose`; the
        routed URL has the same form. Any other is forwarded on a loopback TCP port
        (HUD-style clients need TCP) that serves only connections from this process's
        uid and closes any other at once. The server tunnels only capabilities it
        declared, so a name it does not know yields a local URL whose connections are
        refused.

        Raises:
            ChannelClosed: this client was closed.
        """
        if self._closed:
            raise ChannelClosed(f"{cap.name!r}: client is closed")
        if cap.name in self._forwarders:
            return self._forwarders[cap.name][0]
        loop = asyncio.get_running_loop()
        try:
            unix = unix_path(cap.url) is not None
        except ValueError:  # a Unix URL with a relative path: the server refuses it
            unix = True
        if unix:
            sock = self._unix_listener()
            url = with_unix_path(cap.url, sock.getsockname())
            server = loop.create_unix_server(lambda: _LocalEnd(self, cap.name), sock=sock)
        else:
            sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            sock.bind(("127.0.0.1", 0))
            sock.listen(128)
            sock.setblocking(False)
            url = tcp_route(cap.url, sock.getsockname()[1])
            server = loop.create_server(lambda: _LocalEnd(self, cap.name, same_uid=True), sock=sock)
        routed = Capability(cap.name, cap.protocol, url, cap.params)
        self._forwarders[cap.name] = (routed, loop.create_task(server))
        return routed

    def _unix_listener(self) -> socket.socket:
        """A listening Unix socket in this client's private directory, made on first use."""
        if self._socket_dir is None:
            self._socket_dir = owned_tempdir("fwd")
        sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        try:
            sock.bind(os.path.join(self._socket_dir, f"{len(self._forwarders)}.sock"))
            sock.listen(128)
            sock.setblocking(False)
        except BaseException:
            sock.close()
            raise
        return sock

    def _admit(self, transport: asyncio.BaseTransport) -> bool:
        """Whether a TCP forwarder connection comes from our own uid (see `route`)."""
        uid = loopback_peer_uid(
            transport.get_extra_info("sockname"), transport.get_extra_info("peername")
        )
        if uid == os.geteuid():
            return True
        if uid not in self._refused_uids:  # once per uid: a flood must not flood the log
            self._refused_uids.add(uid)
            _log.warning("%s: refused a forwarder connection from uid %s", self.url, uid)
        return False

    async def _tunnel(self, name: str, local: Pipe) -> None:
        try:
            await self._dial(lambda: TunnelClient(name, self._token, local))
        except OSError:
            if local.transport is not None:
                local.transport.close()

    # -- teardown ----------------------------------------------------------------------

    async def aclose(self) -> None:
        """Close forwarders and the connection; idempotent."""
        if self._closed:
            return
        self._closed = True
        for _, task in self._forwarders.values():
            with contextlib.suppress(Exception):
                (await task).close()
        if self._socket_dir is not None:
            shutil.rmtree(self._socket_dir, ignore_errors=True)
        if self._transport is not None:
            self._transport.close()
        if self._link is not None:
            if self._session is not None and self._session.call is not None:
                self._interrupt(ChannelClosed("client closed"))
            self._link.drop()
        for fut in self._pending.values():
            if not fut.done():
                fut.set_exception(ChannelClosed("client closed"))
        for local in self._locals:
            if local.transport is not None:
                local.transport.close()
        if self._tunnels:
            for task in self._tunnels:
                task.cancel()
            await asyncio.gather(*self._tunnels, return_exceptions=True)


def _optional_str(value: Any) -> str | None:
    return value if isinstance(value, str) else None


def _remote_error(err: Any) -> ChannelError:
    code = err.get("code") if isinstance(err, dict) else None
    if not isinstance(code, int) or isinstance(code, bool):
        return ProtocolError(f"malformed JSON-RPC error: {err!r}")
    return _refused(code, str(err.get("message", "")), err.get("data"))


def _refused(code: int, message: str, data: Any) -> RemoteError:
    # A HUD server says "bye interrupted the task" when a bye cuts a call short.
    interrupted = message in (INTERRUPTED, "bye interrupted the task")
    cls = TaskCancelled if interrupted else RemoteError
    return cls(code, message, data)


_REQUEST_ENVELOPE = len(request_frame(0, "", {})) - len(b"{}\n")  # a request frame's own bytes


def connect(
    target: str | EnvServer,
    *,
    ready_timeout: float = 30.0,
    token: str | None = None,
    session_id: str | None = None,
    resume_token: str | None = None,
) -> contextlib.AbstractAsyncContextManager[EnvClient]:
    """Connect and say hello, retrying until the server answers; close on exit.

    Args:
        target: `tcp://host:port`, `unix:///path` (a Unix socket), or an in-process
            `EnvServer` (no socket at all).
        ready_timeout: how long to keep retrying connect + hello.
        token: shared secret for servers bound beyond loopback.
        session_id: resume this parked session instead of starting a fresh one.
        resume_token: the `Manifest.resume_token` of the session to resume.

    Raises:
        ConnectTimeout: nothing answered hello within `ready_timeout`.
        ConnectError: the URL is unusable.
        RemoteError: the server refused hello (bad token, unknown session).
    """
    return _Connecting(target, ready_timeout, token, session_id, resume_token)


class _Connecting:
    """`connect()`'s context: the client once it said hello, closed on exit."""

    __slots__ = ("args", "client")

    def __init__(self, *args: Any) -> None:
        self.args = args
        self.client: EnvClient | None = None

    async def __aenter__(self) -> EnvClient:
        target, _, token, session_id, resume_token = self.args
        if not isinstance(target, str):
            await TURN  # connecting yields to the loop once, as a socket's would
            if not target.closed:  # in process: no wire, no wait
                client = EnvClient(target.dial_memory, f"memory://{target.env.name}", token=token)
                client._attach(target)
                if session_id is not None or resume_token is not None:
                    try:
                        await client.hello(session_id, resume_token)
                    except BaseException:
                        await client.aclose()
                        raise
                self.client = client
                return client
        self.client = await _connect_ready(*self.args)
        return self.client

    async def __aexit__(self, *exc: object) -> None:
        client, self.client = self.client, None
        if client is not None:
            await client.aclose()


async def _connect_ready(
    target: str | EnvServer,
    ready_timeout: float,
    token: str | None,
    session_id: str | None,
    resume_token: str | None = None,
) -> EnvClient:
    dial, url = dialer_for(target)
    loop = asyncio.get_running_loop()
    deadline = loop.time() + ready_timeout
    delay = 0.005
    while True:
        client = EnvClient(dial, url, token=token)
        try:
            # A server that accepts but never answers must not outlast the deadline.
            async with asyncio.timeout_at(deadline):
                await client._open()
                await client.hello(session_id, resume_token)
            return client
        except (OSError, ConnectionLost) as exc:  # TimeoutError is an OSError
            await client.aclose()
            if loop.time() + delay > deadline:
                raise ConnectTimeout(f"{url}: not ready after {ready_timeout:g}s: {exc}") from exc
        except BaseException:
            await client.aclose()
            raise
        await asyncio.sleep(delay)
        delay = min(delay * 2, 0.25)
