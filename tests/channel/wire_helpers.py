"""Wire-test helpers: frames, a raw connection, the test environment and its probe.

The fixtures built on them live in this folder's `conftest.py`.
"""

from __future__ import annotations

import asyncio
import json
import math
from collections.abc import Callable
from typing import Any

from proctor.env import Capability, Environment
from proctor.records import Grade, SubScore

TIMEOUT = 5.0


def frame(obj: Any) -> bytes:
    """The compact NDJSON line DESIGN 3 specifies."""
    return json.dumps(obj, separators=(",", ":"), ensure_ascii=False).encode() + b"\n"


def result(id: Any, value: Any) -> bytes:
    return frame({"jsonrpc": "2.0", "id": id, "result": value})


def error(id: Any, code: int, message: str) -> bytes:
    return frame({"jsonrpc": "2.0", "id": id, "error": {"code": code, "message": message}})


class Raw:
    """A raw TCP connection to a server: bytes in, lines out, nothing interpreted."""

    def __init__(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.reader = reader
        self.writer = writer

    async def send(self, msg: Any) -> None:
        self.writer.write(msg if isinstance(msg, bytes) else frame(msg))
        await self.writer.drain()

    async def line(self) -> bytes:
        return await asyncio.wait_for(self.reader.readline(), TIMEOUT)

    async def recv(self) -> Any:
        line = await self.line()
        assert line.endswith(b"\n"), f"connection closed instead of a frame: {line!r}"
        return json.loads(line)

    async def call(self, method: str, params: Any = None, id: Any = 1) -> Any:
        msg: dict[str, Any] = {"jsonrpc": "2.0", "id": id, "method": method}
        if params is not None:
            msg["params"] = params
        await self.send(msg)
        return await self.recv()

    async def result(self, method: str, params: Any = None, id: Any = 1) -> Any:
        reply = await self.call(method, params, id)
        assert "result" in reply, reply
        return reply["result"]

    async def closed(self) -> bool:
        """True once the server closed the connection (after any frames still queued)."""
        return await asyncio.wait_for(self.reader.read(), TIMEOUT) == b""

    def close(self) -> None:
        self.writer.close()


class Probe:
    """What the test environment's task code did, for side-effect assertions."""

    def __init__(self) -> None:
        self.ran: list[str] = []
        self.finals: list[str] = []
        self.answers: list[Any] = []
        self.entered = asyncio.Event()
        self.gate = asyncio.Event()
        self._final = asyncio.Event()

    def final(self, tag: str) -> None:
        """Record that a task's `finally` ran."""
        self.finals.append(tag)
        self._final.set()

    async def wait_final(self, tag: str) -> None:
        async with asyncio.timeout(TIMEOUT):
            while tag not in self.finals:
                self._final.clear()
                await self._final.wait()


async def until(condition: Callable[[], bool]) -> None:
    """Wait for a condition the server reaches on its own (e.g. parking after a drop)."""
    for _ in range(int(TIMEOUT / 0.002)):
        if condition():
            return
        await asyncio.sleep(0.002)
    raise AssertionError("condition not reached in time")


def build_env(probe: Probe, capabilities: list[Capability]) -> Environment:
    env = Environment("wire-test", "1.2.3", capabilities=capabilities)

    @env.template(description="Greets someone.")
    async def greet(name: str = "world") -> Any:
        answer = yield f"hello {name}"
        probe.answers.append(answer)
        yield 1.0 if answer == name else 0.0

    @env.template
    async def count(n: int, scale: float = 1.0) -> Any:
        probe.ran.append("count")
        yield f"{type(n).__name__}:{n!r} {type(scale).__name__}:{scale!r}"
        yield 1.0

    @env.template
    async def chat() -> Any:
        yield [{"role": "system", "content": "be brief"}, {"role": "user", "content": "hi"}]
        yield 1.0

    @env.template
    async def episode() -> Any:
        # per-episode data for declared capabilities, keyed by capability name (as HUD)
        yield {
            "prompt": "use the episode shell",
            "bindings": {"echo": {"slot": 3}, "ghost": {"url": "tcp://127.0.0.1:9"}},
            "extra": [1, 2],
        }
        yield 1.0

    @env.template
    async def misbound() -> Any:
        # bindings an author got wrong: a list of capabilities instead of data by name
        yield {"prompt": "p", "bindings": [{"name": "nourl"}]}
        yield 1.0

    @env.template
    async def scored(kind: str) -> Any:
        yield "grade me"
        if kind == "float":
            yield 0.25
        elif kind == "bool":
            yield True
        elif kind == "eval":
            yield Grade(
                subscores=[SubScore("a", 1.0), SubScore("b", 0.0, weight=3.0)],
                info={"k": "v"},
                content="explained",
                is_error=True,
            )
        elif kind == "dict":
            yield {"score": 1, "info": {"n": 2}, "done": True}
        elif kind == "nan":
            yield math.nan
        elif kind == "inf":
            yield {"score": math.inf}
        elif kind == "text":
            yield "high"
        elif kind == "huge":
            yield 10**400
        elif kind == "raise":
            raise ValueError("boom")
        # any other kind: the generator ends without a second yield

    @env.template(returns=int)
    async def typed() -> Any:
        answer = yield "an integer please"
        probe.answers.append(answer)
        yield 1.0 if answer.content == 42 else 0.0

    @env.template
    async def guarded(tag: str) -> Any:
        try:
            yield f"guarded {tag}"
            yield 1.0
        finally:
            probe.final(tag)

    @env.template
    async def slow_start(tag: str = "slow") -> Any:
        try:
            probe.entered.set()
            await probe.gate.wait()
            yield "finally started"
            yield 1.0
        finally:
            probe.final(tag)

    @env.template
    async def slow_grade(tag: str = "slow") -> Any:
        try:
            yield "answer slowly"
            probe.entered.set()
            await probe.gate.wait()
            yield 1.0
        finally:
            probe.final(tag)

    @env.template
    async def broken_start() -> Any:
        raise RuntimeError("cannot set up")
        yield "never"

    @env.template
    async def broken_teardown() -> Any:
        try:
            yield "p"
            yield 1.0
        finally:
            raise RuntimeError("teardown broke")

    @env.template
    async def slow_teardown(tag: str = "slow") -> Any:
        try:
            yield "p"
            yield 1.0
        finally:
            probe.entered.set()
            await probe.gate.wait()
            probe.final(tag)

    @env.template
    async def unserializable(kind: str) -> Any:
        if kind == "object":
            yield {"prompt": "p", "extra": object()}
        elif kind == "surrogate":
            yield "bytes read with surrogateescape: \udcff"
        else:
            yield {"prompt": "p", "n": {1: math.nan}}
        yield 1.0

    @env.template
    async def positional(x: int, /) -> Any:  # the runner cannot call this with keywords
        yield "never"
        yield 1.0

    return env
