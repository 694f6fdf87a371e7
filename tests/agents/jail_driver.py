"""The driver of test_command_jail, run as its own process so its environment (the test
sets fake keys in it) is the one the harness must not see.

`python jail_driver.py OUT [cwd]`: one rollout of jail_harness.py behind the proxy, with
a TCP echo capability and a shell; prints the run's outcome as JSON.
"""

import asyncio
import json
import os
import sys
from pathlib import Path

from proctor import Capability, Environment, rollout
from proctor.agents import CommandAgent
from proctor.proxy import InterceptionProxy, Upstream
from proctor.testing import FakeModelServer

HARNESS = str(Path(__file__).with_name("jail_harness.py"))

env = Environment("jailed")
env.add_shell()


async def echo(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
    writer.write(b"echo:" + await reader.readline())
    await writer.drain()
    writer.close()


@env.initialize
async def start_echo() -> None:
    server = await asyncio.start_server(echo, "127.0.0.1", 0)
    env.add_capability(
        Capability("echo", "tcp", f"tcp://127.0.0.1:{server.sockets[0].getsockname()[1]}")
    )


@env.template
async def say(word: str):
    answer = yield f"say {word}"
    yield 1.0 if word in str(answer) else 0.0


async def main(out: str) -> None:
    dump = {"DUMP": out, "DRIVER_PID": str(os.getpid())}
    agent = CommandAgent([sys.executable, HARNESS], writable=[out], env=dump)
    async with FakeModelServer() as fake:
        upstream = Upstream(fake.url, api_key=os.environ["OPENAI_API_KEY"])  # the driver's key
        async with InterceptionProxy(upstream) as proxy:
            run = await rollout(say(word="apple"), agent, proxy=proxy)
        keys = [r.headers.get("authorization", "") for r in fake.requests]
    turns = [s for s in run.trace.steps if s.kind == "model_turn"]
    error = None if run.error is None else f"{run.error.phase}: {run.error.message}"
    outcome = {"error": error, "reward": run.reward, "answer": run.answer, "turns": len(turns)}
    print(json.dumps({**outcome, "upstream_keys": keys}))


if __name__ == "__main__":
    asyncio.run(main(sys.argv[1]))
