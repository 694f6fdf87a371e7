"""A control session: JSON-RPC calls on one connection (hello, tasks.*, bye, tunnel).

`_Session` runs over any connection (a `Link`) of a `SessionHost` (the `EnvServer`, which
keeps live sessions and parked tasks): it answers `hello` (checking
the token and resuming or adopting a parked task), starts, solves, grades and cancels the
task it holds, and parks that task when its connection goes away mid-task.

Frames arrive through `feed` and each call's answer leaves as a frame, the task calls
running in tasks of their own. An in-process client calls `direct` instead: the same
methods and checks, run in the caller's task, the result handed back as its JSON (what
the frame would carry) and an error answer raised as a `_Refusal`.
"""

from __future__ import annotations

import asyncio
import logging
import secrets
from collections.abc import Callable, Coroutine
from types import CoroutineType
from typing import Any, Protocol

from .._errors import ParseError, TaskError
from .._usererror import format_traceback, redact
from ..env import Environment, TaskRunner
from ._framing import decode, encode
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

__all__ = ["DirectCall", "Link", "Parked", "SessionHost", "quiet_cancel"]

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


class _Refusal(Exception):
    """A call's error answer (`code`, `message`, `data`), raised where it is decided."""

    def __init__(self, code: int, message: str, data: Any = None) -> None:
        super().__init__(message)
        self.code = code
        self.message = message
        self.data = data


class DirectCall:
    """A call an in-process client runs in its own task: interrupting it cancels that
    task, which then raises `reason` (the caller's view of why) instead."""

    __slots__ = ("reason", "task", "waiters")

    def __init__(self, task: asyncio.Task[Any]) -> None:
        self.task: asyncio.Task[Any] | None = task
        self.reason: BaseException | None = None
        self.waiters: list[asyncio.Future[None]] | None = None

    def interrupt(self, reason: BaseException) -> None:
        """Cancel the call (once) unless it ended; the first reason given stands."""
        if self.task is not None and self.reason is None:
            self.reason = reason
            self.task.cancel()

    async def wait(self) -> None:
        """Return once the call has unwound."""
        if self.task is not None:
            fut = asyncio.get_running_loop().create_future()
            if self.waiters is None:
                self.waiters = []
            self.waiters.append(fut)
            await fut

    def finish(self) -> None:
        self.task = None
        for fut in self.waiters or ():
            if not fut.done():
                fut.set_result(None)


Call = asyncio.Task[None] | DirectCall


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

    def enter(self, sid: str, session: _Session) -> None:
        """`session` is live under `sid`."""
        ...

    def leave(self, sid: str, session: _Session) -> None:
        """`session` is no longer live under `sid`."""
        ...

    def is_live(self, sid: str) -> bool: ...

    def resumable(self, sid: str, resume_token: str | None) -> bool: ...

    def parked_ids(self) -> list[str]: ...

    def park(self, sid: str, runner: TaskRunner, resume_token: str, weight: int) -> None: ...

    def unpark(self, sid: str) -> Parked: ...

    def bindings(self) -> list[dict[str, Any]]: ...


class _Session:
    """The JSON-RPC dialogue of one control connection.

    Its id is minted (and the session entered live under it) at once for a socket
    connection, on first use for an in-process client (`live=False`); its resume token
    when first told or needed.
    """

    __slots__ = (
        "_id",
        "_resume_token",
        "call",
        "call_rid",
        "conn",
        "reply_bytes",
        "request_bytes",
        "runner",
        "server",
        "task_bytes",
        "weighing",
    )

    def __init__(self, server: SessionHost, conn: Link, *, live: bool = True) -> None:
        self.server = server
        self.conn = conn
        self._id: str | None = None
        self._resume_token: str | None = None  # told only to this session's client
        self.runner: TaskRunner | None = None
        self.task_bytes = 0  # the runner's estimated weight, should it be parked
        self.request_bytes = 0  # size of the frame being handled
        self.reply_bytes = 0  # size of the last reply sent
        self.weighing: int | None = None  # a start's request size until its reply weighs it
        self.call: Call | None = None
        self.call_rid: Any = _NOTIFY
        if live:
            self._mint()

    @property
    def id(self) -> str:
        return self._id if self._id is not None else self._mint()

    def _mint(self) -> str:
        self._id = sid = _new_id()
        self.server.enter(sid, self)
        return sid

    @property
    def resume_token(self) -> str:
        if self._resume_token is None:
            self._resume_token = secrets.token_urlsafe(32)
        return self._resume_token

    # -- framing ------------------------------------------------------------------

    def reply(self, rid: Any, result: Any) -> None:
        self._release()
        if rid is not _NOTIFY:
            try:
                frame = result_frame(rid, result)
            except TypeError as exc:
                frame = error_frame(rid, TASK_ERROR, f"result is not JSON-serializable: {exc}")
            self._replied(len(frame))
            self.conn.send(frame)

    def _replied(self, size: int) -> None:
        self.reply_bytes = size
        if self.weighing is not None:
            self.task_bytes = _TASK_OVERHEAD + self.weighing + size
            self.weighing = None

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
        try:
            out = self._dispatch(rid, method, params)
        except _Refusal as refused:
            self.error(rid, refused.code, refused.message, refused.data)
            return
        if type(out) is CoroutineType:
            self.call_rid = _BUSY_CONTROL if method in _CONTROL else rid
            self.call = call = self.server.spawn(self._answer(rid, out, method == "bye"))
            call.add_done_callback(self._call_done)
        else:
            self.reply(rid, out)

    def _dispatch(self, rid: Any, method: str, params: dict[str, Any]) -> Any:
        """Run the method's handler: its result, or the coroutine that computes it.

        Raises:
            _Refusal: the error to answer.
        """
        if self.call is not None and method not in _CONTROL:
            raise _Refusal(INVALID_REQUEST, f"{method}: a task call is still running")
        handler = _HANDLERS.get(method)
        if handler is None:
            raise _Refusal(METHOD_NOT_FOUND, f"method not found: {method}")
        try:
            return handler(self, rid, params)
        except _Refusal:
            raise
        except Exception as exc:  # e.g. a template whose schema cannot be built
            raise self._failure(method, exc) from None

    async def _answer(self, rid: Any, call: Coroutine[Any, Any, Any], close: bool) -> None:
        """A task call's answer, sent as a frame (then, after `bye`, the close)."""
        try:
            result = await call
        except _Refusal as refused:
            self.error(rid, refused.code, refused.message, refused.data)
            return
        self.reply(rid, result)
        if close:
            self.conn.close()

    async def direct(self, method: str, params: dict[str, Any], size: int) -> bytes:
        """One call of an in-process client, run in its task: the JSON of the result.

        `params` have crossed JSON already; `size` is what their frame would weigh.

        Raises:
            _Refusal: the error answer (a call interrupted by a cancel: `INTERRUPTED`).
        """
        self.request_bytes = size
        out = self._dispatch(_NOTIFY, method, params)
        if type(out) is CoroutineType:
            task = asyncio.current_task()
            assert task is not None
            self.call = here = DirectCall(task)
            self.call_rid = _BUSY_CONTROL if method in _CONTROL else _NOTIFY
            try:
                out = await out
            except asyncio.CancelledError:
                reason = here.reason
                if reason is not None and task.uncancel() == 0:
                    raise reason from None
                raise
            finally:
                here.finish()
                if self.call is here:
                    self.call = None
            if here.reason is not None:  # the call swallowed its interruption
                task.uncancel()
        try:
            data = encode(out)
        except TypeError as exc:
            message = f"result is not JSON-serializable: {exc}"
            self._replied(len(message) + _REPLY_ENVELOPE)
            raise _Refusal(TASK_ERROR, message) from None
        self._replied(len(data) + _REPLY_ENVELOPE)
        if method == "bye":
            self.conn.close()
        return data

    # -- methods --------------------------------------------------------------------

    def hello(self, rid: Any, params: dict[str, Any]) -> dict[str, Any]:
        sid, given = params.get("session_id"), params.get("resume_token")
        if sid is not None and sid != self._id:
            if not isinstance(sid, str) or not isinstance(given, str | None):
                raise _Refusal(INVALID_PARAMS, "hello: session_id and resume_token are strings")
            server = self.server
            # The same answer for an unknown id and a wrong token: nothing is learnt.
            if not server.resumable(sid, given):
                raise _Refusal(INVALID_REQUEST, f"hello: unknown session {sid} or wrong token")
            if server.is_live(sid):
                raise _Refusal(
                    INVALID_REQUEST, f"hello: session {sid} is still live on another connection"
                )
            if self.runner is not None:
                raise _Refusal(INVALID_REQUEST, "hello: this session already holds a task")
            parked = server.unpark(sid)
            self.runner, self.task_bytes = parked.runner, parked.weight
            self._resume_token = parked.resume_token
            if self._id is not None:
                server.leave(self._id, self)
            self._id = sid
            server.enter(sid, self)
        env = self.server.env
        return {
            "session_id": self.id,
            "resume_token": self.resume_token,
            "env": {"name": env.name, "version": env.version},
            "bindings": self.server.bindings(),
        }

    def list_tasks(self, rid: Any, params: dict[str, Any]) -> dict[str, Any]:
        return {"tasks": [t.info() for t in self.server.env.tasks.values()]}

    def start(self, rid: Any, params: dict[str, Any]) -> Coroutine[Any, Any, Any]:
        task_id, args = params.get("id"), params.get("args")
        if args is None:
            args = {}
        if not isinstance(task_id, str) or not isinstance(args, dict):
            raise _Refusal(INVALID_PARAMS, "tasks.start: need {id: str, args?: object}")
        template = self.server.env.tasks.get(task_id)
        if template is None:
            raise _Refusal(INVALID_PARAMS, f"tasks.start: unknown task {task_id!r}")
        try:
            runner = TaskRunner(template, args, user=params.get("user"))
        except Exception as exc:
            raise self._failure(task_id, exc) from None
        return self._start(rid, runner, self.request_bytes)

    def grade(self, rid: Any, params: dict[str, Any]) -> Coroutine[Any, Any, Any]:
        runner, self.runner = self.runner, None
        if runner is None:
            parked = self.server.parked_ids()
            if not parked or not self.server.legacy_resume:
                # Exactly HUD's text: `hud task grade --url` starts the task on it.
                raise _Refusal(INVALID_REQUEST, "no task in progress")
            if len(parked) > 1:  # HUD's legacy answer names them, as HUD's server does
                raise _Refusal(
                    INVALID_REQUEST,
                    f"tasks.grade: {len(parked)} parked tasks ({', '.join(parked)}); "
                    "resume one with hello {session_id}",
                )
            runner = self.server.unpark(parked[0]).runner
        return self._grade(rid, runner, params)

    def solve(self, rid: Any, params: dict[str, Any]) -> Coroutine[Any, Any, Any]:
        runner = self.runner
        if runner is None:
            raise _Refusal(INVALID_REQUEST, "no task in progress")
        return self._solve(rid, runner)

    def user(self, rid: Any, params: dict[str, Any]) -> dict[str, Any]:
        """`tasks.user`: the held task's simulated users ask a new user-model endpoint
        (a driver that resumed the session sends its own; the old one died with its
        driver)."""
        runner = self.runner
        if runner is None:
            raise _Refusal(INVALID_REQUEST, "no task in progress")
        user = params.get("user")
        if user is not None and not isinstance(user, dict):
            raise _Refusal(INVALID_PARAMS, "tasks.user: need {user: object or null}")
        runner.renew_user(user)
        return {"renewed": True}

    def cancel(self, rid: Any, params: dict[str, Any]) -> Any:
        if self.call is None and self.runner is None:
            return {"cancelled": False}
        return self._interrupt({"cancelled": True})

    def bye(self, rid: Any, params: dict[str, Any]) -> Coroutine[Any, Any, Any]:
        return self._interrupt({"goodbye": True})

    def tunnel_in_session(self, rid: Any, params: dict[str, Any]) -> None:
        raise _Refusal(INVALID_REQUEST, "tunnel.open: only valid as a connection's first frame")

    # -- async calls ------------------------------------------------------------------

    def _release(self) -> None:
        # A call's answer frees the session before the frame leaves: a client that
        # sends its next request on reading the reply must not find us still busy.
        call = self.call
        if call is not None and call is asyncio.current_task():
            self.call = None

    def _call_done(self, task: asyncio.Task[None]) -> None:
        if self.call is task:
            self.call = None

    def _interrupt(self, result: dict[str, Any]) -> Coroutine[Any, Any, Any]:
        if self.call is not None and self.call_rid is _BUSY_CONTROL:
            raise _Refusal(INVALID_REQUEST, "a cancel is already running")
        return self._stop(self.call, result)

    async def _stop(self, prior: Call | None, result: dict[str, Any]) -> dict[str, Any]:
        await self._settle(prior)
        return result

    async def _settle(self, prior: Call | None) -> None:
        """Interrupt the running call (it answers its own error), then close the task."""
        if isinstance(prior, DirectCall):
            prior.interrupt(_Refusal(TASK_ERROR, INTERRUPTED))
            await prior.wait()
        elif prior is not None and not prior.done():
            prior.cancel()
            await asyncio.gather(prior, return_exceptions=True)
        runner, self.runner = self.runner, None
        if runner is not None:
            await quiet_cancel(runner)

    async def _start(self, rid: Any, runner: TaskRunner, request_bytes: int) -> Any:
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
            raise self._failure(runner.task_id, exc) from None
        self.weighing = request_bytes
        return result

    async def _grade(self, rid: Any, runner: TaskRunner, params: dict[str, Any]) -> Any:
        try:
            return await runner.grade(params)
        except asyncio.CancelledError:
            self.error(rid, TASK_ERROR, INTERRUPTED)
            await quiet_cancel(runner)
            raise
        except Exception as exc:
            raise self._failure(runner.task_id, exc) from None

    async def _solve(self, rid: Any, runner: TaskRunner) -> Any:
        try:
            answer = await runner.solve()
        except asyncio.CancelledError:
            self.error(rid, TASK_ERROR, INTERRUPTED)
            raise
        except Exception as exc:
            raise self._failure(runner.task_id, exc) from None
        return {"answer": answer}

    def _failure(self, what: str, exc: Exception) -> _Refusal:
        """The answer to a failure: a `TaskError` as it is, anything else as a crash of
        `what`.

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
            return _Refusal(TASK_ERROR, message, data)
        # the environment's code is at fault, not the client's request
        message = redact(f"{what}: {type(exc).__name__}: {exc}")
        data = _traceback_data(exc)
        log.error("%s crashed\n%s", what, message if data is None else data["traceback"])
        return _Refusal(TASK_ERROR, message, data)

    def detach(self) -> None:
        """The connection is gone: park a suspended task, drop everything else."""
        sid = self._id
        if sid is not None:
            self.server.leave(sid, self)
        if self.call is not None:  # a call in flight is interrupted, never parked
            self.server.spawn(self._settle(self.call))
        elif self.runner is not None:
            runner, self.runner = self.runner, None
            if sid is None:  # never told: parked under an id of its own, not live
                self._id = sid = _new_id()
            self.server.park(sid, runner, self.resume_token, self.task_bytes)


_BUSY_CONTROL = object()  # call_rid while a cancel or bye is running
_CONTROL = frozenset({"tasks.cancel", "bye"})  # calls that may overtake a running one
_REPLY_ENVELOPE = len(result_frame(0, None)) - len(b"null\n")  # a result frame's own bytes

_HANDLERS: dict[str, Callable[[_Session, Any, dict[str, Any]], Any]] = {
    "hello": _Session.hello,
    "tasks.list": _Session.list_tasks,
    "tasks.start": _Session.start,
    "tasks.grade": _Session.grade,
    "tasks.solve": _Session.solve,
    "tasks.user": _Session.user,
    "tasks.cancel": _Session.cancel,
    "bye": _Session.bye,
    "tunnel.open": _Session.tunnel_in_session,
}


def _new_id() -> str:
    return f"sess-{secrets.token_hex(8)}"


def _traceback_data(exc: BaseException | None) -> dict[str, str] | None:
    """`{"traceback": ...}` (bounded, redacted) for a JSON-RPC error's `data`, or None."""
    text = None if exc is None else format_traceback(exc)
    return None if text is None else {"traceback": text}


async def quiet_cancel(runner: TaskRunner) -> None:
    try:
        await runner.cancel()
    except TaskError as exc:
        log.warning("%s", exc)
