"""The control channel server: sessions, parking, tunnels, on TCP, Unix sockets or in memory.

One `Server` serves one `Environment`. Every connection is a `_Connection` protocol
whose first frame picks its kind: `tunnel.open` splices raw bytes to a declared
capability, anything else starts a control session (`_Session`). The session code is
transport-agnostic: the same protocol object runs over a socket or a `MemoryTransport`.
"""

from __future__ import annotations

import asyncio
import contextlib
import hmac
import ipaddress
import logging
import os
import secrets
import socket
import stat
from collections.abc import Callable, Coroutine
from typing import Any

from .._errors import TaskError
from ..env._environment import Environment
from ..env._runner import TaskRunner
from ._framing import FrameTooLarge, LineBuffer, ParseError, decode
from ._memory import MemoryTransport, StreamProtocol, memory_pair
from ._messages import (
    INTERRUPTED,
    INVALID_PARAMS,
    INVALID_REQUEST,
    METHOD_NOT_FOUND,
    PARSE_ERROR,
    TASK_ERROR,
    error_frame,
    result_frame,
)
from ._splice import Pipe, host_port

__all__ = ["DEFAULT_PARK_TTL", "Server"]

log = logging.getLogger("proctor.channel")

DEFAULT_PARK_TTL = 3600.0
_LINGER = 2.0  # seconds a rejected connection stays half-open for its error frame
_NOTIFY = object()  # reply id of a notification: executed, never answered


class _Parked:
    __slots__ = ("runner", "timer")

    def __init__(self, runner: TaskRunner, timer: asyncio.TimerHandle) -> None:
        self.runner = runner
        self.timer = timer


class Server:
    """Serve an environment's control channel.

    Args:
        env: the environment (its hooks are the caller's business: see `serve`).
        park_ttl: seconds a task parked by a dropped connection waits to be resumed.
        token: shared secret every connection's first frame must carry as
            `params.token`; required when binding a non-loopback address.
    """

    def __init__(
        self, env: Environment, *, park_ttl: float = DEFAULT_PARK_TTL, token: str | None = None
    ) -> None:
        self.env = env
        self.park_ttl = park_ttl
        self._token = token.encode() if token else None
        self._live: dict[str, _Session] = {}
        self._parked: dict[str, _Parked] = {}
        self._connections: set[_Connection] = set()
        self._listeners: list[asyncio.Server] = []
        self._background: set[asyncio.Task[Any]] = set()
        self._closed = False
        self._tcp: tuple[str, int] | None = None
        self._unix_paths: list[str] = []

    # -- transports ---------------------------------------------------------------

    async def listen(self, host: str = "127.0.0.1", port: int = 0) -> tuple[str, int]:
        """Bind a TCP listener and return the bound (host, port) before serving.

        Raises:
            ValueError: a non-loopback host without a token.
            OSError: the address cannot be bound.
        """
        if not _is_loopback(host) and self._token is None:
            raise ValueError(f"binding {host} (not loopback) requires a token")
        loop = asyncio.get_running_loop()
        listener = await loop.create_server(lambda: _Connection(self), host, port)
        self._listeners.append(listener)
        bound = listener.sockets[0].getsockname()
        return bound[0], bound[1]

    async def listen_unix(
        self, path: str | None = None, *, sock: socket.socket | None = None
    ) -> str:
        """Serve on a Unix socket and return its path: bind `path` or adopt `sock`.

        A stale socket file at `path` is replaced, and `aclose()` removes the file this
        call bound. No token is needed: the file's permissions decide who may connect.

        Raises:
            ValueError: neither or both of `path` and `sock` given.
            OSError: the path cannot be bound.
        """
        if (path is None) == (sock is None):
            raise ValueError("listen_unix takes a path or a listening socket, not both")
        loop = asyncio.get_running_loop()
        if sock is not None:
            listener = await loop.create_unix_server(lambda: _Connection(self), sock=sock)
            bound = str(sock.getsockname())
        else:
            assert path is not None
            with contextlib.suppress(FileNotFoundError):
                if stat.S_ISSOCK(os.lstat(path).st_mode):
                    os.unlink(path)  # a socket left by a server that died
            listener = await loop.create_unix_server(lambda: _Connection(self), path=path)
            bound = path
            self._unix_paths.append(path)
        self._listeners.append(listener)
        return bound

    async def tcp_address(self) -> tuple[str, int]:
        """A loopback address for this server, binding one listener on first use."""
        if self._tcp is None:
            self._tcp = await self.listen()
        return self._tcp

    def connect_memory(self, protocol: StreamProtocol) -> MemoryTransport:
        """Open an in-memory connection for `protocol`; returns its transport."""
        if self._closed:
            raise ConnectionRefusedError("server is closed")
        transport, _ = memory_pair(protocol, _Connection(self))
        return transport

    async def aclose(self) -> None:
        """Stop listening, cancel every call and task (live and parked), close connections."""
        self._closed = True
        for listener in self._listeners:
            listener.close()
        for conn in list(self._connections):
            conn.abort()
        await asyncio.sleep(0)  # aborted connections hear connection_lost and detach
        for sid in list(self._parked):
            self._expire(sid)
        while self._background:
            await asyncio.gather(*list(self._background), return_exceptions=True)
        for listener in self._listeners:
            await listener.wait_closed()
        for path in self._unix_paths:
            with contextlib.suppress(FileNotFoundError):
                os.unlink(path)

    # -- shared state ---------------------------------------------------------------

    def spawn(self, coro: Coroutine[Any, Any, Any]) -> asyncio.Task[Any]:
        task = asyncio.get_running_loop().create_task(coro)
        self._background.add(task)
        task.add_done_callback(self._background.discard)
        return task

    def park(self, sid: str, runner: TaskRunner) -> None:
        if self._closed:
            self.spawn(_quiet_cancel(runner))
            return
        timer = asyncio.get_running_loop().call_later(self.park_ttl, self._expire, sid)
        self._parked[sid] = _Parked(runner, timer)

    def unpark(self, sid: str) -> TaskRunner:
        parked = self._parked.pop(sid)
        parked.timer.cancel()
        return parked.runner

    def _expire(self, sid: str) -> None:
        parked = self._parked.pop(sid, None)
        if parked is not None:
            parked.timer.cancel()
            self.spawn(_quiet_cancel(parked.runner))

    def check_token(self, params: Any) -> bool:
        if self._token is None:
            return True
        given = params.get("token") if isinstance(params, dict) else None
        return isinstance(given, str) and hmac.compare_digest(given.encode(), self._token)

    def capability_url(self, name: Any) -> str | None:
        """Where the declared capability `name` listens; None if it is not declared.

        Per-episode bindings are data for declared capabilities, never new endpoints:
        a tunnel reaches only what the environment declared.
        """
        if not isinstance(name, str):
            return None
        with contextlib.suppress(KeyError):
            return self.env.capability(name).url
        return None

    def bindings(self) -> list[dict[str, Any]]:
        return [c.to_manifest() for c in self.env.capabilities]


class _Connection(Pipe):
    """One accepted connection: a preface, then a control session or a raw tunnel."""

    def __init__(self, server: Server) -> None:
        super().__init__()
        self.server = server
        self.buffer: LineBuffer | None = LineBuffer()  # None once it is a tunnel
        self.session: _Session | None = None
        self.opening: asyncio.Task[None] | None = None  # a tunnel's dial
        self.linger: asyncio.TimerHandle | None = None  # set once rejected: input is dropped

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        super().connection_made(transport)
        self.server._connections.add(self)

    def send(self, frame: bytes) -> None:
        if self.transport is not None and not self.transport.is_closing():
            self.transport.write(frame)

    def close(self) -> None:
        if self.transport is not None:
            self.transport.close()

    def abort(self) -> None:
        if self.transport is not None:
            self.transport.abort()

    def reject(self, frame: bytes) -> None:
        """Send one error frame, then close without the frame being lost to a reset.

        Closing a socket with unread input makes the kernel send RST, which can destroy
        the error frame before the client reads it; so stop writing (half-close),
        drop whatever still arrives, and close on the client's EOF or after a moment.
        """
        transport = self.transport
        if transport is None or transport.is_closing() or self.linger is not None:
            return
        transport.write(frame)
        if not transport.can_write_eof():
            transport.close()
            return
        transport.write_eof()
        transport.resume_reading()
        self.linger = asyncio.get_running_loop().call_later(_LINGER, transport.close)

    def data_received(self, data: bytes) -> None:
        if self.linger is not None:
            return
        if self.buffer is None:
            super().data_received(data)
            return
        try:
            if self.session is None:
                frame, data = self.buffer.feed_first(data)
                if frame is None or not self._preface(frame, data):
                    return
            lines = self.buffer.feed(data)
        except FrameTooLarge as exc:
            self._dispatch(exc.frames)
            self.reject(error_frame(None, INVALID_REQUEST, str(exc)))
            return
        self._dispatch(lines)

    def _dispatch(self, lines: list[bytes]) -> None:
        for line in lines:
            assert self.session is not None
            self.session.feed(line)

    def pause_writing(self) -> None:
        # A client that sends requests without reading replies: stop reading its
        # requests until it catches up, so replies never pile up without bound.
        if self.session is not None and self.transport is not None:
            self.transport.pause_reading()
        else:
            super().pause_writing()

    def resume_writing(self) -> None:
        if self.session is not None and self.transport is not None:
            if not self.transport.is_closing():
                self.transport.resume_reading()
        else:
            super().resume_writing()

    def eof_received(self) -> bool:
        # A control session ends with its client's EOF; a tunnel passes it on.
        return self.buffer is None and self.linger is None and super().eof_received()

    def connection_lost(self, exc: Exception | None) -> None:
        super().connection_lost(exc)
        if self.linger is not None:
            self.linger.cancel()
        self.server._connections.discard(self)
        if self.session is not None:
            self.session.detach()
        if self.opening is not None:  # nobody is left to splice to
            self.opening.cancel()
        self.transport = None

    def _preface(self, frame: bytes, rest: bytes) -> bool:
        """Check the token, then start a session (True) or a tunnel (False)."""
        try:
            msg = decode(frame)
        except ParseError:
            msg = None
        params = msg.get("params") if isinstance(msg, dict) else None
        if not self.server.check_token(params):
            mid = msg.get("id") if isinstance(msg, dict) else None
            self.reject(
                error_frame(mid, INVALID_REQUEST, "unauthorized: a valid token is required")
            )
            return False
        if isinstance(msg, dict) and msg.get("method") == "tunnel.open":
            self.buffer = None
            if rest:
                super().data_received(rest)
            self.opening = self.server.spawn(self._open_tunnel(msg))
            return False
        self.session = _Session(self.server, self)
        self.session.feed(frame)
        return True

    async def _open_tunnel(self, msg: dict[str, Any]) -> None:
        mid = msg.get("id")
        params = msg.get("params")
        name = params.get("capability") if isinstance(params, dict) else None
        url = self.server.capability_url(name)
        if url is None:
            self.reject(
                error_frame(mid, INVALID_PARAMS, f"tunnel.open: unknown capability {name!r}")
            )
            return
        daemon = Pipe()  # holds what the daemon says until our reply frame is out
        try:
            host, port = host_port(url)
            await asyncio.get_running_loop().create_connection(lambda: daemon, host, port)
        except (OSError, ValueError) as exc:
            self.reject(error_frame(mid, TASK_ERROR, f"tunnel.open: cannot reach {name!r}: {exc}"))
            return
        # Had the client left meanwhile, connection_lost would have cancelled us.
        assert daemon.transport is not None and self.transport is not None
        if mid is not None:
            self.send(result_frame(mid, {"capability": name}))
        daemon.attach(self.transport)
        self.attach(daemon.transport)


class _Session:
    """The JSON-RPC dialogue of one control connection."""

    def __init__(self, server: Server, conn: _Connection) -> None:
        self.server = server
        self.conn = conn
        self.id = f"sess-{secrets.token_hex(8)}"
        self.runner: TaskRunner | None = None
        self.call: asyncio.Task[None] | None = None
        self.call_rid: Any = _NOTIFY
        server._live[self.id] = self

    # -- framing ------------------------------------------------------------------

    def reply(self, rid: Any, result: Any) -> None:
        self._release()
        if rid is not _NOTIFY:
            try:
                frame = result_frame(rid, result)
            except TypeError as exc:
                frame = error_frame(rid, TASK_ERROR, f"result is not JSON-serializable: {exc}")
            self.conn.send(frame)

    def error(self, rid: Any, code: int, message: str) -> None:
        self._release()
        if rid is not _NOTIFY:
            self.conn.send(error_frame(rid, code, message))

    def feed(self, line: bytes) -> None:
        try:
            msg = decode(line)
        except ParseError:
            self.error(None, PARSE_ERROR, "parse error: not valid JSON")
            return
        self.handle(msg)

    def handle(self, msg: Any) -> None:
        if not isinstance(msg, dict):
            what = (
                "batch arrays are not supported"
                if isinstance(msg, list)
                else "a request must be a JSON object"
            )
            self.error(None, INVALID_REQUEST, f"invalid request: {what}")
            return
        rid = msg.get("id", _NOTIFY)
        if rid is not _NOTIFY and (
            isinstance(rid, bool) or not isinstance(rid, str | int | float | None)
        ):
            self.error(None, INVALID_REQUEST, "invalid request: id must be a string or number")
            return
        method = msg.get("method")
        if not isinstance(method, str) or msg.get("jsonrpc", "2.0") != "2.0":
            self.error(rid, INVALID_REQUEST, "invalid request: need jsonrpc '2.0' and a method")
            return
        params = msg.get("params")
        if params is None:
            params = {}
        elif not isinstance(params, dict):
            self.error(rid, INVALID_PARAMS, f"{method}: params must be an object")
            return
        if self.call is not None and method not in ("tasks.cancel", "bye"):
            self.error(rid, INVALID_REQUEST, f"{method}: a task call is still running")
            return
        handler = _HANDLERS.get(method)
        if handler is None:
            self.error(rid, METHOD_NOT_FOUND, f"method not found: {method}")
            return
        try:
            handler(self, rid, params)
        except Exception as exc:  # e.g. a template whose schema cannot be built
            self._failed(rid, method, exc)

    # -- methods --------------------------------------------------------------------

    def hello(self, rid: Any, params: dict[str, Any]) -> None:
        sid = params.get("session_id")
        if sid is not None and sid != self.id:
            if not isinstance(sid, str):
                self.error(rid, INVALID_PARAMS, "hello: session_id must be a string")
                return
            if sid in self.server._live:
                self.error(
                    rid,
                    INVALID_REQUEST,
                    f"hello: session {sid} is still live on another connection",
                )
                return
            if sid not in self.server._parked:
                self.error(rid, INVALID_REQUEST, f"hello: unknown session {sid}")
                return
            if self.runner is not None:
                self.error(rid, INVALID_REQUEST, "hello: this session already holds a task")
                return
            self.runner = self.server.unpark(sid)
            del self.server._live[self.id]
            self.id = sid
            self.server._live[sid] = self
        env = self.server.env
        self.reply(
            rid,
            {
                "session_id": self.id,
                "env": {"name": env.name, "version": env.version},
                "bindings": self.server.bindings(),
            },
        )

    def list_tasks(self, rid: Any, params: dict[str, Any]) -> None:
        self.reply(rid, {"tasks": [t.info() for t in self.server.env.tasks.values()]})

    def start(self, rid: Any, params: dict[str, Any]) -> None:
        task_id, args = params.get("id"), params.get("args")
        if args is None:
            args = {}
        if not isinstance(task_id, str) or not isinstance(args, dict):
            self.error(rid, INVALID_PARAMS, "tasks.start: need {id: str, args?: object}")
            return
        template = self.server.env.tasks.get(task_id)
        if template is None:
            self.error(rid, INVALID_PARAMS, f"tasks.start: unknown task {task_id!r}")
            return
        try:
            runner = TaskRunner(template, args)
        except Exception as exc:
            self._failed(rid, task_id, exc)
            return
        self._begin(rid, self._start(rid, runner))

    def grade(self, rid: Any, params: dict[str, Any]) -> None:
        runner, self.runner = self.runner, None
        if runner is None:
            parked = list(self.server._parked)
            if not parked:
                # Exactly HUD's text: `hud task grade --url` starts the task on it.
                self.error(rid, INVALID_REQUEST, "no task in progress")
                return
            if len(parked) > 1:
                self.error(
                    rid,
                    INVALID_REQUEST,
                    f"tasks.grade: {len(parked)} parked tasks ({', '.join(parked)}); "
                    "resume one with hello {session_id}",
                )
                return
            runner = self.server.unpark(parked[0])
        self._begin(rid, self._grade(rid, runner, params))

    def cancel(self, rid: Any, params: dict[str, Any]) -> None:
        if self.call is None and self.runner is None:
            self.reply(rid, {"cancelled": False})
            return
        self._interrupt(rid, {"cancelled": True}, close=False)

    def bye(self, rid: Any, params: dict[str, Any]) -> None:
        self._interrupt(rid, {"goodbye": True}, close=True)

    def tunnel_in_session(self, rid: Any, params: dict[str, Any]) -> None:
        self.error(rid, INVALID_REQUEST, "tunnel.open: only valid as a connection's first frame")

    # -- async calls ------------------------------------------------------------------

    def _begin(self, rid: Any, coro: Coroutine[Any, Any, None]) -> None:
        self.call_rid = rid
        self.call = self.server.spawn(coro)
        self.call.add_done_callback(self._call_done)

    def _release(self) -> None:
        # A call's answer frees the session before the frame leaves: a client that
        # sends its next request on reading the reply must not find us still busy.
        call = self.call
        if call is not None and call is asyncio.current_task():
            self.call = None

    def _call_done(self, task: asyncio.Task[None]) -> None:
        if self.call is task:
            self.call = None

    def _interrupt(self, rid: Any, result: dict[str, Any], *, close: bool) -> None:
        if self.call is not None and self.call_rid is _BUSY_CONTROL:
            self.error(rid, INVALID_REQUEST, "a cancel is already running")
            return
        prior = self.call
        self.call_rid = _BUSY_CONTROL
        self.call = self.server.spawn(self._stop(prior, rid, result, close))
        self.call.add_done_callback(self._call_done)

    async def _stop(
        self, prior: asyncio.Task[None] | None, rid: Any, result: dict[str, Any], close: bool
    ) -> None:
        await self._settle(prior)
        self.reply(rid, result)
        if close:
            self.conn.close()

    async def _settle(self, prior: asyncio.Task[None] | None) -> None:
        """Interrupt the running call (it answers its own error), then close the task."""
        if prior is not None and not prior.done():
            prior.cancel()
            await asyncio.gather(prior, return_exceptions=True)
        runner, self.runner = self.runner, None
        if runner is not None:
            await _quiet_cancel(runner)

    async def _start(self, rid: Any, runner: TaskRunner) -> None:
        old, self.runner = self.runner, runner
        try:
            if old is not None:
                await _quiet_cancel(old)  # its teardown failing is no reason to refuse this one
            result = await runner.start()
        except asyncio.CancelledError:
            self.error(rid, TASK_ERROR, INTERRUPTED)
            raise
        except Exception as exc:
            self.runner = None
            await _quiet_cancel(runner)
            self._failed(rid, runner.task_id, exc)
            return
        self.reply(rid, result)

    async def _grade(self, rid: Any, runner: TaskRunner, params: dict[str, Any]) -> None:
        try:
            result = await runner.grade(params)
        except asyncio.CancelledError:
            self.error(rid, TASK_ERROR, INTERRUPTED)
            await _quiet_cancel(runner)
            raise
        except Exception as exc:
            self._failed(rid, runner.task_id, exc)
            return
        self.reply(rid, result)

    def _failed(self, rid: Any, what: str, exc: Exception) -> None:
        """Answer a failure: a `TaskError` as it is, anything else as a crash of `what`."""
        if isinstance(exc, TaskError):
            log.info("task failed: %s", exc)
            self.error(rid, TASK_ERROR, str(exc))
        else:  # the environment's code is at fault, not the client's request
            log.error("%s crashed", what, exc_info=exc)
            self.error(rid, TASK_ERROR, f"{what}: {type(exc).__name__}: {exc}")

    def detach(self) -> None:
        """The connection is gone: park a suspended task, drop everything else."""
        if self.server._live.get(self.id) is self:
            del self.server._live[self.id]
        if self.call is not None:  # a call in flight is interrupted, never parked
            self.server.spawn(self._settle(self.call))
        elif self.runner is not None:
            runner, self.runner = self.runner, None
            self.server.park(self.id, runner)


_BUSY_CONTROL = object()  # call_rid while a cancel or bye is running

_HANDLERS: dict[str, Callable[[_Session, Any, dict[str, Any]], None]] = {
    "hello": _Session.hello,
    "tasks.list": _Session.list_tasks,
    "tasks.start": _Session.start,
    "tasks.grade": _Session.grade,
    "tasks.cancel": _Session.cancel,
    "bye": _Session.bye,
    "tunnel.open": _Session.tunnel_in_session,
}


async def _quiet_cancel(runner: TaskRunner) -> None:
    try:
        await runner.cancel()
    except TaskError as exc:
        log.warning("%s", exc)


def _is_loopback(host: str) -> bool:
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:  # any other host name may resolve anywhere
        return False
