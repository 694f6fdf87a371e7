"""A control session: JSON-RPC calls on one connection (hello, tasks.*, bye, tunnel).

`_Session` runs over any connection (a `Link`) of a `SessionHost` (the `EnvServer`, which
keeps live sessions and parked tasks): it answers `hello` (checking
the token and resuming or adopting a parked task), starts, solves, grades and cancels the
task it holds, and parks that task when its connection goes away mid-task.
"""

from __future__ import annotations

import asyncio
import logging
import secrets
from collections.abc import Callable, Coroutine
from typing import Any, Protocol

from .._errors import ParseError, TaskError
from .._usererror import format_traceback, redact
from ..env import Environment, TaskRunner
from ._framing import decode
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

__all__ = ["Link", "Parked", "SessionHost", "quiet_cancel"]

log = logging.getLogger("proctor.channel")

_NOTIFY = object()  # reply id of a notification: executed, never answered
_TASK_OVERHEAD = 16 * 1024  # bytes a parked task is counted beyond its start frames


class Parked:
    """A task whose connection went away mid-task, kept until a resume or `timer`."""

    __slots__ = ("resume_token", "runner", "timer", "weight")

    def __init__(
        self, runner: TaskRunner, timer: asyncio.TimerHandle, resume_token: str, weight: int
    ) -> None:
        self.runner = runner
        self.timer = timer
        self.resume_token = resume_token
        self.weight = weight


class Link(Protocol):
    """The connection a session answers on."""

    def send(self, frame: bytes) -> None: ...

    def close(self) -> None: ...


class SessionHost(Protocol):
    """What a session needs of its server (`EnvServer`): the environment, the table of
    live sessions, parking, and a place to run background work."""

    env: Environment
    legacy_resume: bool

    def spawn(self, coro: Coroutine[Any, Any, Any]) -> asyncio.Task[Any]: ...

    def enter(self, session: _Session) -> None:
        """`session` is live under its id."""
        ...

    def leave(self, session: _Session) -> None:
        """`session` is no longer live under its id."""
        ...

    def is_live(self, sid: str) -> bool: ...

    def resumable(self, sid: str, resume_token: str | None) -> bool: ...

    def parked_ids(self) -> list[str]: ...

    def park(self, sid: str, runner: TaskRunner, resume_token: str, weight: int) -> None: ...

    def unpark(self, sid: str) -> Parked: ...

    def bindings(self) -> list[dict[str, Any]]: ...


class _Session:
    """The JSON-RPC dialogue of one control connection."""

    def __init__(self, server: SessionHost, conn: Link) -> None:
        self.server = server
        self.conn = conn
        self.id = f"sess-{secrets.token_hex(8)}"
        self.resume_token = secrets.token_urlsafe(32)  # told only to this session's client
        self.runner: TaskRunner | None = None
        self.task_bytes = 0  # the runner's estimated weight, should it be parked
        self.request_bytes = 0  # size of the frame being handled
        self.reply_bytes = 0  # size of the last reply sent
        self.call: asyncio.Task[None] | None = None
        self.call_rid: Any = _NOTIFY
        server.enter(self)

    # -- framing ------------------------------------------------------------------

    def reply(self, rid: Any, result: Any) -> None:
        self._release()
        if rid is not _NOTIFY:
            try:
                frame = result_frame(rid, result)
            except TypeError as exc:
                frame = error_frame(rid, TASK_ERROR, f"result is not JSON-serializable: {exc}")
            self.reply_bytes = len(frame)
            self.conn.send(frame)

    def error(self, rid: Any, code: int, message: str, data: Any = None) -> None:
        self._release()
        if rid is not _NOTIFY:
            self.conn.send(error_frame(rid, code, message, data))

    def feed(self, line: bytes) -> None:
        self.request_bytes = len(line)
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
        sid, given = params.get("session_id"), params.get("resume_token")
        if sid is not None and sid != self.id:
            if not isinstance(sid, str) or not isinstance(given, str | None):
                self.error(rid, INVALID_PARAMS, "hello: session_id and resume_token are strings")
                return
            server = self.server
            # The same answer for an unknown id and a wrong token: nothing is learnt.
            if not server.resumable(sid, given):
                self.error(rid, INVALID_REQUEST, f"hello: unknown session {sid} or wrong token")
                return
            if server.is_live(sid):
                self.error(
                    rid,
                    INVALID_REQUEST,
                    f"hello: session {sid} is still live on another connection",
                )
                return
            if self.runner is not None:
                self.error(rid, INVALID_REQUEST, "hello: this session already holds a task")
                return
            parked = server.unpark(sid)
            self.runner, self.task_bytes = parked.runner, parked.weight
            self.resume_token = parked.resume_token
            server.leave(self)
            self.id = sid
            server.enter(self)
        env = self.server.env
        self.reply(
            rid,
            {
                "session_id": self.id,
                "resume_token": self.resume_token,
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
        self._begin(rid, self._start(rid, runner, self.request_bytes))

    def grade(self, rid: Any, params: dict[str, Any]) -> None:
        runner, self.runner = self.runner, None
        if runner is None:
            parked = self.server.parked_ids()
            if not parked or not self.server.legacy_resume:
                # Exactly HUD's text: `hud task grade --url` starts the task on it.
                self.error(rid, INVALID_REQUEST, "no task in progress")
                return
            if len(parked) > 1:  # HUD's legacy answer names them, as HUD's server does
                self.error(
                    rid,
                    INVALID_REQUEST,
                    f"tasks.grade: {len(parked)} parked tasks ({', '.join(parked)}); "
                    "resume one with hello {session_id}",
                )
                return
            runner = self.server.unpark(parked[0]).runner
        self._begin(rid, self._grade(rid, runner, params))

    def solve(self, rid: Any, params: dict[str, Any]) -> None:
        runner = self.runner
        if runner is None:
            self.error(rid, INVALID_REQUEST, "no task in progress")
            return
        self._begin(rid, self._solve(rid, runner))

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
            await quiet_cancel(runner)

    async def _start(self, rid: Any, runner: TaskRunner, request_bytes: int) -> None:
        old, self.runner = self.runner, runner
        try:
            if old is not None:
                await quiet_cancel(old)  # its teardown failing is no reason to refuse this one
            result = await runner.start()
        except asyncio.CancelledError:
            self.error(rid, TASK_ERROR, INTERRUPTED)
            raise
        except Exception as exc:
            self.runner = None
            await quiet_cancel(runner)
            self._failed(rid, runner.task_id, exc)
            return
        self.reply(rid, result)
        self.task_bytes = _TASK_OVERHEAD + request_bytes + self.reply_bytes

    async def _grade(self, rid: Any, runner: TaskRunner, params: dict[str, Any]) -> None:
        try:
            result = await runner.grade(params)
        except asyncio.CancelledError:
            self.error(rid, TASK_ERROR, INTERRUPTED)
            await quiet_cancel(runner)
            raise
        except Exception as exc:
            self._failed(rid, runner.task_id, exc)
            return
        self.reply(rid, result)

    async def _solve(self, rid: Any, runner: TaskRunner) -> None:
        try:
            answer = await runner.solve()
        except asyncio.CancelledError:
            self.error(rid, TASK_ERROR, INTERRUPTED)
            raise
        except Exception as exc:
            self._failed(rid, runner.task_id, exc)
            return
        self.reply(rid, {"answer": answer})

    def _failed(self, rid: Any, what: str, exc: Exception) -> None:
        """Answer a failure: a `TaskError` as it is, anything else as a crash of `what`.

        The error's `data.traceback` is the traceback of the environment's code that
        raised (a `TaskError`'s cause), when there is one; secret values of this
        process's environment are redacted from it, from the message and from the log.
        A lifecycle hook's failure also says which (`data.phase`: setup, finalize).
        """
        if isinstance(exc, TaskError):
            message = redact(str(exc))
            log.info("task failed: %s", message)
            data = _traceback_data(exc.__cause__)
            if exc.phase is not None:
                data = {**(data or {}), "phase": exc.phase}
            self.error(rid, TASK_ERROR, message, data)
        else:  # the environment's code is at fault, not the client's request
            message = redact(f"{what}: {type(exc).__name__}: {exc}")
            data = _traceback_data(exc)
            log.error("%s crashed\n%s", what, message if data is None else data["traceback"])
            self.error(rid, TASK_ERROR, message, data)

    def detach(self) -> None:
        """The connection is gone: park a suspended task, drop everything else."""
        self.server.leave(self)
        if self.call is not None:  # a call in flight is interrupted, never parked
            self.server.spawn(self._settle(self.call))
        elif self.runner is not None:
            runner, self.runner = self.runner, None
            self.server.park(self.id, runner, self.resume_token, self.task_bytes)


_BUSY_CONTROL = object()  # call_rid while a cancel or bye is running

_HANDLERS: dict[str, Callable[[_Session, Any, dict[str, Any]], None]] = {
    "hello": _Session.hello,
    "tasks.list": _Session.list_tasks,
    "tasks.start": _Session.start,
    "tasks.grade": _Session.grade,
    "tasks.solve": _Session.solve,
    "tasks.cancel": _Session.cancel,
    "bye": _Session.bye,
    "tunnel.open": _Session.tunnel_in_session,
}


def _traceback_data(exc: BaseException | None) -> dict[str, str] | None:
    """`{"traceback": ...}` (bounded, redacted) for a JSON-RPC error's `data`, or None."""
    text = None if exc is None else format_traceback(exc)
    return None if text is None else {"traceback": text}


async def quiet_cancel(runner: TaskRunner) -> None:
    try:
        await runner.cancel()
    except TaskError as exc:
        log.warning("%s", exc)
