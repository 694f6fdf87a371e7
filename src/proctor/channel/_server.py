"""The control channel server: sessions, parking, tunnels, on TCP, Unix sockets or in memory.

One `EnvServer` serves one `Environment`. Every connection is a `_Connection` protocol
whose first frame picks its kind: `tunnel.open` splices raw bytes to a declared
capability, anything else starts a control session (`_Session`, in `_session`, which
sees the server only as a `SessionHost`). The session code is
transport-agnostic: the same protocol object runs over a socket or a `MemoryTransport`.
"""

from __future__ import annotations

import asyncio
import contextlib
import hmac
import ipaddress
import logging
import os
import resource
import socket
import stat
import weakref
from collections.abc import Callable, Coroutine
from typing import Any, Protocol

from ..env import Environment, TaskRunner
from ._framing import MAX_FRAME, FrameTooLarge, LineBuffer, ParseError, decode
from ._memory import MemoryTransport, StreamProtocol, memory_pair
from ._messages import (
    INVALID_PARAMS,
    INVALID_REQUEST,
    TASK_ERROR,
    error_frame,
    result_frame,
)
from ._session import Link, Parked, _Refusal, _Session, quiet_cancel
from ._splice import Pipe, dial

__all__ = ["DEFAULT_PARK_TTL", "MAX_FIRST_FRAME", "EnvServer", "LocalLink"]

log = logging.getLogger("proctor.channel")

DEFAULT_PARK_TTL = 3600.0
MAX_FIRST_FRAME = 64 * 1024
"""Largest first frame of a connection (its hello or tunnel.open), checked before the token."""

_LINGER = 2.0  # seconds a rejected connection stays half-open for its error frame
_ACCEPT_LOG_EVERY = 60.0  # seconds between two lines about accept() lacking descriptors


class EnvServer:
    """Serve an environment's control channel.

    Every connection's first frame is at most `MAX_FIRST_FRAME` bytes (later ones
    `MAX_FRAME`); see docs/wire.md for the limits below and what happens past them.

    Args:
        env: the environment (its hooks are the caller's business: see `serve`).
        park_ttl: seconds a task parked by a dropped connection waits to be resumed.
        token: shared secret every connection's first frame must carry as
            `params.token`; required when binding a non-loopback address.
        legacy_resume: HUD's resume rules: `hello {session_id}` resumes a parked session
            without its `resume_token`, and `tasks.grade` on a fresh session adopts the
            only parked task. For HUD clients on a loopback or tokened server only.
        handshake_timeout: seconds a socket connection may take to send its first frame.
        max_connections: socket connections open at once; more are refused at accept.
        max_buffered: bytes of unfinished frames held across all connections; the
            connection that would pass it is refused.
        max_parked: parked tasks kept at once; the oldest is cancelled beyond it.
        max_parked_bytes: estimated bytes of parked tasks (their start request and
            prompt, plus 16 KiB each); the oldest is cancelled beyond it.
    """

    def __init__(
        self,
        env: Environment,
        *,
        park_ttl: float = DEFAULT_PARK_TTL,
        token: str | None = None,
        legacy_resume: bool = False,
        handshake_timeout: float = 5.0,
        max_connections: int = 4096,
        max_buffered: int = 128 * 1024 * 1024,
        max_parked: int = 1024,
        max_parked_bytes: int = 64 * 1024 * 1024,
    ) -> None:
        self.env = env
        self.park_ttl = park_ttl
        self.legacy_resume = legacy_resume
        self.handshake_timeout = handshake_timeout
        self.max_connections = max_connections
        self.max_buffered = max_buffered
        self.max_parked = max_parked
        self.max_parked_bytes = max_parked_bytes
        self._token = token.encode() if token else None
        self._live: dict[str, _Session] = {}
        self._parked: dict[str, Parked] = {}
        self._parked_bytes = 0
        self._buffered = 0  # bytes of unfinished frames held by all connections
        self._sockets = 0  # open socket connections (memory ones are not counted)
        self._accept_logged = -_ACCEPT_LOG_EVERY  # when running out of descriptors was logged
        self._connections: set[_Connection | LocalLink] = set()
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
            raise ValueError(
                f"binding {host} (not loopback) requires a token: `proctor serve --token-env "
                "VAR` reads it from the variable VAR (EnvServer takes token=)"
            )
        loop = self._prepare_listening()
        listener = await loop.create_server(lambda: _Connection(self, remote=True), host, port)
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
        loop = self._prepare_listening()
        if sock is not None:
            listener = await loop.create_unix_server(
                lambda: _Connection(self, remote=True), sock=sock
            )
            bound = str(sock.getsockname())
        else:
            assert path is not None
            with contextlib.suppress(FileNotFoundError):
                if stat.S_ISSOCK(os.lstat(path).st_mode):
                    os.unlink(path)  # a socket left by a server that died
            listener = await loop.create_unix_server(
                lambda: _Connection(self, remote=True), path=path
            )
            bound = path
            self._unix_paths.append(path)
        self._listeners.append(listener)
        return bound

    def _prepare_listening(self) -> asyncio.AbstractEventLoop:
        loop = asyncio.get_running_loop()
        _raise_fd_limit()
        _AcceptFilter.install(loop, self)
        return loop

    def _owns_listener(self, fileno: int) -> bool:
        return any(s.fileno() == fileno for lst in self._listeners for s in lst.sockets)

    def _accept_failed(self, exc: BaseException | None) -> None:
        """asyncio could not accept (no descriptor left): one log line a minute at most."""
        now = asyncio.get_running_loop().time()
        if now - self._accept_logged >= _ACCEPT_LOG_EVERY:
            self._accept_logged = now
            reason = exc.strerror if isinstance(exc, OSError) and exc.strerror else exc
            log.warning("cannot accept connections (%s); retrying every second", reason)

    async def tcp_address(self) -> tuple[str, int]:
        """A loopback address for this server, binding one listener on first use."""
        if self._tcp is None:
            self._tcp = await self.listen()
        return self._tcp

    def open_session(self, link: LocalLink, token: str | None) -> _Session:
        """A control session for an in-process client that answers on `link`: no
        frames, no tasks of ours (see `_Session.direct`); the token is checked as on
        a connection's first frame.

        Raises:
            ConnectionRefusedError: the server is closed.
            _Refusal: the token is wrong.
        """
        if self._closed:
            raise ConnectionRefusedError("server is closed")
        if not self.token_ok(token):
            raise _Refusal(INVALID_REQUEST, "unauthorized: a valid token is required")
        self._connections.add(link)
        return _Session(self, link, live=False)

    @property
    def closed(self) -> bool:
        """Whether `aclose()` was called."""
        return self._closed

    async def dial_memory(self, factory: Callable[[], StreamProtocol]) -> MemoryTransport:
        """`connect_memory` for the protocol `factory` makes (a client's dialer)."""
        return self.connect_memory(factory())

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

    # -- SessionHost: shared state the sessions call on ------------------------------

    def spawn(self, coro: Coroutine[Any, Any, Any]) -> asyncio.Task[Any]:
        task = asyncio.get_running_loop().create_task(coro)
        self._background.add(task)
        task.add_done_callback(self._background.discard)
        return task

    def enter(self, sid: str, session: _Session) -> None:
        self._live[sid] = session

    def leave(self, sid: str, session: _Session) -> None:
        if self._live.get(sid) is session:
            del self._live[sid]

    def is_live(self, sid: str) -> bool:
        return sid in self._live

    def parked_ids(self) -> list[str]:
        return list(self._parked)

    def park(self, sid: str, runner: TaskRunner, resume_token: str, weight: int) -> None:
        if self._closed:
            self.spawn(quiet_cancel(runner))
            return
        timer = asyncio.get_running_loop().call_later(self.park_ttl, self._expire, sid)
        self._parked[sid] = Parked(runner, timer, resume_token, weight)
        self._parked_bytes += weight
        while self._parked and (
            len(self._parked) > self.max_parked or self._parked_bytes > self.max_parked_bytes
        ):
            oldest = next(iter(self._parked))
            log.info("parking is full: cancelled the oldest parked task")
            self._expire(oldest)

    def unpark(self, sid: str) -> Parked:
        parked = self._parked.pop(sid)
        self._parked_bytes -= parked.weight
        parked.timer.cancel()
        return parked

    def _expire(self, sid: str) -> None:
        if sid in self._parked:
            self.spawn(quiet_cancel(self.unpark(sid).runner))

    def resumable(self, sid: str, resume_token: str | None) -> bool:
        """Whether `resume_token` is that of session `sid`, live or parked (compared in
        constant time); without a token, whether the server allows legacy resume."""
        if sid in self._live:
            known = self._live[sid].resume_token
        elif sid in self._parked:
            known = self._parked[sid].resume_token
        else:
            return False
        if resume_token is None:
            return self.legacy_resume
        return hmac.compare_digest(resume_token.encode(), known.encode())

    def check_token(self, params: Any) -> bool:
        """Whether a first frame's `params.token` is the server's (or none is needed)."""
        return self.token_ok(params.get("token") if isinstance(params, dict) else None)

    def token_ok(self, given: Any) -> bool:
        """Whether `given` is the server's token (constant time), or none is needed."""
        if self._token is None:
            return True
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


class LocalLink(Link, Protocol):
    """An in-process client's end of its session, closed with the server (`abort`)."""

    def abort(self) -> None: ...


class _Connection(Pipe):
    """One accepted connection: a preface, then a control session or a raw tunnel.

    A socket connection (`remote`) counts against the server's connection cap and must
    send its first frame within the handshake timeout; every connection's first frame
    is at most `MAX_FIRST_FRAME` bytes, and the bytes it holds count against the
    server's buffer budget.
    """

    def __init__(self, server: EnvServer, *, remote: bool = False) -> None:
        super().__init__()
        self.server = server
        self.remote = remote
        self.buffer: LineBuffer | None = LineBuffer(MAX_FIRST_FRAME)  # None once a tunnel
        self.held = 0  # bytes of this connection's buffer counted in the server's budget
        self.session: _Session | None = None
        self.opening: asyncio.Task[None] | None = None  # a tunnel's dial
        self.linger: asyncio.TimerHandle | None = None  # set once rejected: input is dropped
        self.deadline: asyncio.TimerHandle | None = None  # the handshake's
        self.counted = False  # in the server's socket count
        self.refused = False

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        super().connection_made(transport)
        server = self.server
        if self.remote:
            if server._sockets >= server.max_connections:
                self.refuse(error_frame(None, INVALID_REQUEST, "server busy: too many connections"))
                return
            server._sockets += 1
            self.counted = True
            self.deadline = asyncio.get_running_loop().call_later(
                server.handshake_timeout, self._handshake_expired
            )
        server._connections.add(self)

    def _handshake_expired(self) -> None:
        self.deadline = None
        timeout = self.server.handshake_timeout
        frame = error_frame(None, INVALID_REQUEST, f"no first frame within {timeout:g}s")
        if self.held:  # a trickler may still be sending: half-close, or a reset eats the frame
            self.reject(frame)
        else:  # silent: close at once, freeing its descriptor
            self.refuse(frame)

    def _handshake_done(self) -> None:
        if self.deadline is not None:
            self.deadline.cancel()
            self.deadline = None

    def refuse(self, frame: bytes) -> None:
        """Send one error frame and close at once (the client has sent nothing we lack)."""
        self.refused = True
        self._handshake_done()
        self._account()
        if self.transport is not None and not self.transport.is_closing():
            self.transport.write(frame)
            self.transport.close()

    def _account(self) -> None:
        """Count this connection's unfinished frame in the server's budget; refuse past it."""
        buffer, server = self.buffer, self.server
        now = buffer.pending if buffer is not None and not self.rejected else 0
        server._buffered += now - self.held
        self.held = now
        if now and server._buffered > server.max_buffered:
            self.reject(error_frame(None, INVALID_REQUEST, "server busy: too many bytes buffered"))

    @property
    def rejected(self) -> bool:
        return self.refused or self.linger is not None

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
        if transport is None or transport.is_closing() or self.rejected:
            return
        self._handshake_done()
        transport.write(frame)
        if not transport.can_write_eof():
            transport.close()
            return
        transport.write_eof()
        transport.resume_reading()
        self.linger = asyncio.get_running_loop().call_later(_LINGER, transport.close)
        self._account()

    def data_received(self, data: bytes) -> None:
        if self.rejected:
            return
        if self.buffer is None:
            super().data_received(data)
            return
        try:
            if self.session is None:
                frame, data = self.buffer.feed_first(data)
                if frame is None or not self._preface(frame, data):
                    self._account()
                    return
            lines = self.buffer.feed(data)
        except FrameTooLarge as exc:
            self._dispatch(exc.frames)
            self.reject(error_frame(None, INVALID_REQUEST, str(exc)))
            return
        self._dispatch(lines)
        self._account()

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
        return self.buffer is None and not self.rejected and super().eof_received()

    def connection_lost(self, exc: Exception | None) -> None:
        super().connection_lost(exc)
        if self.linger is not None:
            self.linger.cancel()
        self._handshake_done()
        self.refused = True  # nothing more is buffered or counted
        self._account()
        if self.counted:
            self.counted = False
            self.server._sockets -= 1
        self.server._connections.discard(self)
        if self.session is not None:
            session, self.session = self.session, None  # the session points back here
            session.detach()
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
        self._handshake_done()
        if isinstance(msg, dict) and msg.get("method") == "tunnel.open":
            self.buffer = None
            if rest:
                super().data_received(rest)
            self.opening = self.server.spawn(self._open_tunnel(msg))
            return False
        assert self.buffer is not None
        self.buffer.limit = MAX_FRAME  # authenticated: frames may be large now
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
            await dial(url, lambda: daemon)
        except (OSError, ValueError) as exc:
            self.reject(error_frame(mid, TASK_ERROR, f"tunnel.open: cannot reach {name!r}: {exc}"))
            return
        # Had the client left meanwhile, connection_lost would have cancelled us.
        assert daemon.transport is not None and self.transport is not None
        if mid is not None:
            self.send(result_frame(mid, {"capability": name}))
        daemon.attach(self.transport)
        self.attach(daemon.transport)


def _is_loopback(host: str) -> bool:
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:  # any other host name may resolve anywhere
        return False


_fd_limit_raised = False


def _raise_fd_limit() -> None:
    """Raise this process's soft limit on open files to the hard limit, once."""
    global _fd_limit_raised
    if _fd_limit_raised:
        return
    _fd_limit_raised = True
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft != hard:
        with contextlib.suppress(ValueError, OSError):  # e.g. an unlimited hard limit
            resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))


class _AcceptFilter:
    """A loop exception handler that turns asyncio's report of a failed accept (out of
    file descriptors; one traceback per attempt, many a second) into one line from the
    server that owns the listener. asyncio itself stops accepting for a second each
    time. Everything else goes to the handler that was installed before."""

    MESSAGE = "socket.accept() out of system resource"

    def __init__(self, previous: Any) -> None:
        self.previous = previous
        self.servers: weakref.WeakSet[EnvServer] = weakref.WeakSet()

    @classmethod
    def install(cls, loop: asyncio.AbstractEventLoop, server: EnvServer) -> None:
        current = loop.get_exception_handler()
        if not isinstance(current, cls):
            current = cls(current)
            loop.set_exception_handler(current)
        current.servers.add(server)

    def __call__(self, loop: asyncio.AbstractEventLoop, context: dict[str, Any]) -> None:
        sock = context.get("socket")
        if context.get("message") == self.MESSAGE and sock is not None:
            for server in self.servers:
                if server._owns_listener(sock.fileno()):
                    server._accept_failed(context.get("exception"))
                    return
        if self.previous is None:
            loop.default_exception_handler(context)
        else:
            self.previous(loop, context)
