"""A proctor environment that HUD's own client drives in the interop tests.

Served with `python -m proctor.serve tests/interop/proctor_env.py`; mirrors the HUD
environment in `peer_scripts/hud_env.py` so both directions cover the same shapes.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncGenerator
from typing import Any

from proctor import Capability, Environment, Grade, SubScore

env = Environment("proctor-interop", version="0.1.0-test")

_echo: list[asyncio.Server] = []


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
    server = await asyncio.start_server(_echo_handler, "127.0.0.1", 0)
    _echo.append(server)
    port = server.sockets[0].getsockname()[1]
    env.add_capability(Capability("echo", "echo/1", f"tcp://127.0.0.1:{port}", {"x": 1}))


@env.shutdown
async def _stop_echo() -> None:
    for server in _echo:
        server.close()


@env.template(description="Add two numbers")
async def add(a: int = 1, b: int = 2) -> AsyncGenerator[Any, Any]:
    answer = yield f"What is {a} + {b}?"
    yield 1.0 if str(answer).strip() == str(a + b) else 0.0


@env.template(description="A prompt with per-episode binding data, shaped as HUD reads it")
async def episode(slot: int = 7) -> AsyncGenerator[Any, Any]:
    answer = yield {
        "prompt": [{"role": "user", "content": f"Echo 'slot-{slot}' through the echo binding."}],
        "bindings": {"echo": {"slot": slot}},
    }
    yield {"score": 1.0 if answer == f"slot-{slot}" else 0.0, "seen": answer}


@env.template(description="A graded Grade")
async def rich() -> AsyncGenerator[Any, Any]:
    answer = yield "Say anything."
    yield Grade(
        reward=0.75,
        subscores=[SubScore("form", 1.0, 0.5), SubScore("substance", 0.5, 0.5)],
        info={"k": 1},
        content=f"got {answer!r}",
    )


@env.template(description="Grading blocks until cancelled")
async def slow() -> AsyncGenerator[Any, Any]:
    yield "slow prompt"
    await asyncio.sleep(60)
    yield 1.0


@env.template(description="Raises at start")
async def boom() -> AsyncGenerator[Any, Any]:
    raise RuntimeError("kaboom at start")
    yield "never"
