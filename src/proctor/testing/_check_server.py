"""`check_env_server`: control channel v1 (DESIGN section 3), checked frame by frame."""

from __future__ import annotations

import asyncio
import contextlib
import json
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

from .._urls import host_port

__all__ = ["check_env_server"]

INTERRUPTED = "tasks.cancel interrupted the task"


async def check_env_server(
    url: str,
    *,
    token: str | None = None,
    timeout: float = 10.0,  # noqa: ASYNC109 - per exchange, not one deadline
    extensions: bool = True,
) -> None:
    """Check that a server of the conformance environment speaks control channel v1.

    Talks raw frames, so any implementation (proctor's, HUD's, another language's) can
    be held to the protocol: hello, tasks.list, start and grade (right and wrong
    answers), cancel (idle, after start, and interrupting a running start), one call
    at a time, notifications, parse and request errors that keep the session open,
    parking and resuming a session, and bye. Each check uses its own connection. With
    `extensions` (the default), proctor's additions too: `tasks.solve` (refused with no
    task, the reference answer after a start, the task still gradable) and a start
    result's `needs`; pass False for a server that speaks only HUD's methods.

    Args:
        url: `tcp://host:port` of a server serving `proctor.testing.conformance_env`.
        token: the shared token, for a server bound beyond loopback.
        timeout: seconds to wait for each expected frame.

    Raises:
        AssertionError: the server broke the protocol; the message names the check.
    """
    host, port = host_port(url)
    wire = _Opener(host, port, token, timeout)
    for check in _CHECKS + (_EXTENSIONS if extensions else ()):
        try:
            await check(wire)
        except AssertionError as exc:
            raise AssertionError(f"check_env_server({url}) [{check.__name__[1:]}]: {exc}") from None
        except (OSError, TimeoutError, asyncio.IncompleteReadError) as exc:
            raise AssertionError(
                f"check_env_server({url}) [{check.__name__[1:]}]: {type(exc).__name__}: {exc}"
            ) from None


class _Wire:
    """One connection: send objects or raw lines, read frames one at a time."""

    def __init__(
        self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter, timeout: float
    ) -> None:
        self.reader = reader
        self.writer = writer
        self.timeout = timeout
        self.next_id = 0
        self.hello: dict[str, Any] = {}

    def send(self, frame: dict[str, Any] | bytes) -> None:
        data = frame if isinstance(frame, bytes) else json.dumps(frame).encode() + b"\n"
        self.writer.write(data)

    def request(self, method: str, params: dict[str, Any] | None = None) -> int:
        """Send a request; returns its id."""
        self.next_id += 1
        self.send({"jsonrpc": "2.0", "id": self.next_id, "method": method, "params": params or {}})
        return self.next_id

    async def frame(self) -> dict[str, Any]:
        async with asyncio.timeout(self.timeout):
            line = await self.reader.readline()
        assert line, "the server closed the connection"
        assert line.endswith(b"\n"), f"a frame must end with a newline: {line[:200]!r}"
        msg = json.loads(line)
        assert isinstance(msg, dict), f"a frame must be a JSON object: {line[:200]!r}"
        assert msg.get("jsonrpc") == "2.0", f"frame without jsonrpc '2.0': {msg}"
        return msg

    async def reply(self, rid: Any) -> dict[str, Any]:
        msg = await self.frame()
        assert msg.get("id") == rid, f"expected the reply to id {rid!r}, got {msg}"
        return msg

    async def call(self, method: str, params: dict[str, Any] | None = None) -> Any:
        msg = await self.reply(self.request(method, params))
        assert "result" in msg, f"{method} answered an error: {msg}"
        return msg["result"]

    async def error(self, rid: Any, code: int | tuple[int, ...]) -> str:
        msg = await self.reply(rid)
        err = msg.get("error")
        codes = code if isinstance(code, tuple) else (code,)
        assert isinstance(err, dict) and err.get("code") in codes, f"expected error {code}: {msg}"
        message = err.get("message")
        assert isinstance(message, str), f"error without a message: {msg}"
        return message

    async def closed(self) -> None:
        async with asyncio.timeout(self.timeout):
            rest = await self.reader.read()
        assert not rest, f"expected the connection to close, got {rest[:200]!r}"


class _Opener:
    def __init__(self, host: str, port: int, token: str | None, timeout: float) -> None:
        self.host, self.port, self.token, self.timeout = host, port, token, timeout

    @asynccontextmanager
    async def open(self, *, hello: bool = True) -> AsyncIterator[_Wire]:
        async with asyncio.timeout(self.timeout):
            reader, writer = await asyncio.open_connection(self.host, self.port)
        wire = _Wire(reader, writer, self.timeout)
        try:
            if hello:
                wire.hello = await wire.call("hello", self.params())
            yield wire
        finally:
            writer.close()
            with contextlib.suppress(OSError):
                await writer.wait_closed()

    def params(self, **extra: Any) -> dict[str, Any]:
        return {**extra, "token": self.token} if self.token is not None else extra

    @asynccontextmanager
    async def resume(self, session_id: str, resume_token: Any = None) -> AsyncIterator[_Wire]:
        """A connection that resumed `session_id` (with the `resume_token` its hello gave,
        if any: a HUD server gives none), once the server saw the old one drop."""
        deadline = asyncio.get_running_loop().time() + self.timeout
        secret = {} if resume_token is None else {"resume_token": resume_token}
        while True:
            async with self.open(hello=False) as wire:
                params = self.params(session_id=session_id, **secret)
                msg = await wire.reply(wire.request("hello", params))
                if "result" in msg:
                    wire.hello = msg["result"]
                    yield wire
                    return
            assert asyncio.get_running_loop().time() < deadline, f"cannot resume: {msg}"
            await asyncio.sleep(0.02)


# -- the checks, in order --------------------------------------------------------------------


async def _hello(op: _Opener) -> None:
    async with op.open(hello=False) as w:
        result = await w.call("hello", op.params())
        sid = result.get("session_id")
        assert isinstance(sid, str) and sid.startswith("sess-"), f"session_id {sid!r}"
        env = result.get("env")
        assert isinstance(env, dict), f"hello has no env object: {result}"
        assert env.get("name") == "conformance", f"not the conformance environment: {env}"
        assert isinstance(env.get("version"), str), f"env.version must be a string: {env}"
        assert isinstance(result.get("bindings"), list), f"bindings must be a list: {result}"
        again = await w.call("hello", {})
        assert again.get("session_id") == sid, "a second hello changed the session id"


async def _tasks_list(op: _Opener) -> None:
    async with op.open() as w:
        tasks = (await w.call("tasks.list")).get("tasks")
        assert isinstance(tasks, list), f"tasks.list: tasks must be a list: {tasks!r}"
        by_id = {t.get("id"): t for t in tasks if isinstance(t, dict)}
        assert {"echo", "slow"} <= set(by_id), f"tasks.list lacks echo/slow: {list(by_id)}"
        for tid in ("echo", "slow"):
            entry = by_id[tid]
            assert isinstance(entry.get("description"), str), f"{tid}: description {entry}"
            args = entry.get("args")
            assert isinstance(args, dict) and args.get("type") == "object", f"{tid}: args {args}"
        assert "text" in by_id["echo"]["args"].get("properties", {}), "echo takes no 'text'"


async def _start_and_grade(op: _Opener) -> None:
    async with op.open() as w:
        for answer, score in (("same", 1.0), ("other", 0.0)):
            started = await w.call("tasks.start", {"id": "echo", "args": {"text": "same"}})
            assert isinstance(started, dict), f"tasks.start result {started!r}"
            assert started.get("prompt") == "same", f"tasks.start prompt {started!r}"
            graded = await w.call("tasks.grade", {"answer": answer})
            assert graded.get("score") == score, f"grading {answer!r}: {graded} (want {score})"
            grade_again = w.request("tasks.grade", {"answer": answer})
            await w.error(grade_again, -32600)  # the task was consumed


async def _start_replaces(op: _Opener) -> None:
    async with op.open() as w:
        await w.call("tasks.start", {"id": "echo", "args": {"text": "one"}})
        await w.call("tasks.start", {"id": "echo", "args": {"text": "two"}})
        graded = await w.call("tasks.grade", {"answer": "two"})
        assert graded.get("score") == 1.0, (
            f"a second tasks.start did not replace the first: {graded}"
        )


async def _request_errors(op: _Opener) -> None:
    async with op.open() as w:
        await w.error(w.request("no.such.method"), -32601)
        await w.error(w.request("tasks.grade", {"answer": 1}), -32600)
        await w.error(w.request("tasks.start", {"id": "no-such-task"}), -32602)
        await w.error(w.request("tasks.start", {"args": {}}), -32602)
        msg = await w.error(
            w.request("tasks.start", {"id": "echo", "args": {"text": "x", "bogus": 1}}),
            (-32602, -32000),
        )
        assert "echo" in msg, f"a bad-args error must name the task: {msg!r}"
        w.send({"jsonrpc": "2.0", "id": 99, "method": "tasks.list", "params": [1]})
        await w.error(99, -32602)
        await w.call("tasks.list")  # the session survived every error


async def _bad_frames(op: _Opener) -> None:
    async with op.open() as w:
        w.send(b"{this is not json\n")
        await w.error(None, -32700)
        w.send(b"[1, 2]\n")
        await w.error(None, -32600)
        w.send(b'"a string"\n')
        await w.error(None, -32600)
        await w.call("tasks.list")


async def _notifications(op: _Opener) -> None:
    async with op.open() as w:
        w.send({"jsonrpc": "2.0", "method": "tasks.list", "params": {}})
        w.send({"jsonrpc": "2.0", "method": "no.such.method", "params": {}})
        result = await w.call("tasks.list")  # the next frame answers this, not those
        assert "tasks" in result


async def _cancel(op: _Opener) -> None:
    async with op.open() as w:
        assert (await w.call("tasks.cancel")) == {"cancelled": False}, "idle cancel"
        await w.call("tasks.start", {"id": "echo", "args": {"text": "x"}})
        assert (await w.call("tasks.cancel")) == {"cancelled": True}, "cancel after start"
        await w.error(w.request("tasks.grade", {"answer": "x"}), -32600)


async def _one_call_at_a_time(op: _Opener) -> None:
    async with op.open() as w:
        start = w.request("tasks.start", {"id": "slow", "args": {"seconds": 3600}})
        busy = w.request("tasks.list")
        message = await w.error(busy, -32600)
        assert "still running" in message, f"busy error message {message!r}"
        cancel = w.request("tasks.cancel")
        interrupted = await w.error(start, -32000)  # answered first, then the cancel
        assert interrupted == INTERRUPTED, f"interrupted start said {interrupted!r}"
        reply = await w.reply(cancel)
        assert reply.get("result") == {"cancelled": True}, f"cancel of a running start: {reply}"
        await w.call("tasks.list")


async def _parking(op: _Opener) -> None:
    async with op.open() as w:
        sid = w.hello["session_id"]
        await w.call("tasks.start", {"id": "echo", "args": {"text": "parked"}})
    async with op.resume(sid, w.hello.get("resume_token")) as w:
        assert w.hello.get("session_id") == sid, "hello {session_id} did not resume it"
        graded = await w.call("tasks.grade", {"answer": "parked"})
        assert graded.get("score") == 1.0, f"the resumed task graded {graded}"
    async with op.open(hello=False) as w:
        rid = w.request("hello", op.params(session_id="sess-0000000000000000"))
        await w.error(rid, -32600)


async def _bye(op: _Opener) -> None:
    async with op.open() as w:
        await w.call("tasks.start", {"id": "echo", "args": {"text": "x"}})
        assert (await w.call("bye")) == {"goodbye": True}, "bye result"
        await w.closed()


async def _solve(op: _Opener) -> None:
    async with op.open() as w:
        await w.error(w.request("tasks.solve"), -32600)  # no task in progress
        started = await w.call("tasks.start", {"id": "echo", "args": {"text": "ref"}})
        assert "needs" not in started, f"echo's graders need nothing sent: {started}"
        solved = await w.call("tasks.solve")
        assert solved == {"answer": "ref"}, f"tasks.solve result {solved!r}"
        graded = await w.call("tasks.grade", {"answer": solved["answer"]})
        assert graded.get("score") == 1.0, f"the reference answer graded {graded}"


_EXTENSIONS = (_solve,)
_CHECKS = (
    _hello,
    _tasks_list,
    _start_and_grade,
    _start_replaces,
    _request_errors,
    _bad_frames,
    _notifications,
    _cancel,
    _one_call_at_a_time,
    _parking,
    _bye,
)
