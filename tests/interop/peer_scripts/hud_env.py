"""A HUD environment for proctor's interop tests; served by `python -m hud.environment.server`.

Runs under the peers interpreter (hud==0.6.21). It exercises what a proctor client must
understand from a HUD server: plain prompts and float scores, a dict first yield with
per-episode bindings, a rich `EvaluationResult` grade, a task that raises, a grade that
blocks until cancelled, and a capability (a loopback echo server started by an
initialize hook) reachable through `tunnel.open`.
"""

from __future__ import annotations

import asyncio
import os
from pathlib import Path

from hud import Environment
from hud.capabilities import Capability
from hud.graders import EvaluationResult, SubScore

env = Environment("hud-interop", version="6.0.21-test")

_echo: asyncio.Server | None = None


async def _echo_handler(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
    try:
        while data := await reader.read(65536):
            writer.write(data)
            await writer.drain()
    except ConnectionError:
        pass
    finally:
        writer.close()


@env.initialize
async def _start_echo() -> None:
    global _echo
    _echo = await asyncio.start_server(_echo_handler, "127.0.0.1", 0)
    port = _echo.sockets[0].getsockname()[1]
    env.add_capability(
        Capability(name="echo", protocol="echo/1", url=f"tcp://127.0.0.1:{port}", params={"x": 1})
    )


@env.shutdown
async def _stop_echo() -> None:
    if _echo is not None:
        _echo.close()


@env.template(id="add", description="Add two numbers")
async def add(a: int = 1, b: int = 2):
    answer = yield f"What is {a} + {b}?"
    yield 1.0 if str(answer).strip() == str(a + b) else 0.0


@env.template(id="episode", description="A prompt with per-episode binding data")
async def episode(slot: int = 7):
    answer = yield {
        "prompt": [{"role": "user", "content": f"Echo 'slot-{slot}' through the echo binding."}],
        "bindings": {"echo": {"slot": slot}},
    }
    yield {"score": 1.0 if answer == f"slot-{slot}" else 0.0, "seen": answer}


@env.template(id="rich", description="A graded EvaluationResult")
async def rich():
    answer = yield "Say anything."
    yield EvaluationResult(
        reward=0.75,
        content=f"got {answer!r}",
        info={"k": 1},
        subscores=[
            SubScore(name="form", weight=0.5, value=1.0),
            SubScore(name="substance", weight=0.5, value=0.5),
        ],
    )


@env.template(id="boom", description="Raises at start")
async def boom():
    raise RuntimeError("kaboom at start")
    yield "never"


@env.template(id="slow", description="Grading blocks until cancelled")
async def slow():
    yield "slow prompt"
    if marks := os.environ.get("PROCTOR_INTEROP_MARKS"):
        # the test cancels once grading has started; a tiny file is all that crosses over
        Path(marks, "slow grading").touch()  # noqa: ASYNC240
    await asyncio.Event().wait()
    yield 1.0
