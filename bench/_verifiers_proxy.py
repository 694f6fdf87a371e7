"""The verifiers side of `bench/proxy.py`: verifiers' own interception server, as a peer.

Run under the python of a venv with `verifiers==0.4.0` (`make peers` makes
`.venv-verifiers`); it imports verifiers only, never proctor. Twin of `_proxy_server.py`:

    PYTHON bench/_verifiers_proxy.py --upstream URL --sessions N [--uvloop]

starts `verifiers.v1.interception.server.InterceptionServer` on loopback (no tunnel),
registers N rollout sessions (each with a trace of its own and an eval client pointed at
URL, as a rollout of verifiers' own registers one), prints `{"url": ..., "secrets": [...]}`
as one JSON line, and serves until SIGTERM. Every turn is recorded into its session's
trace, as in a real rollout.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import signal
import sys
from importlib import metadata
from typing import Any

KEY_VAR = "PROCTOR_BENCH_UPSTREAM_KEY"  # the fake upstream accepts any key


def session(upstream: str, i: int) -> Any:
    """One rollout's session: model context (eval client to `upstream`) and trace."""
    from verifiers.v1.clients.client import ModelContext
    from verifiers.v1.configs.client import EvalClientConfig
    from verifiers.v1.session import RolloutSession
    from verifiers.v1.trace import AgentInfo, Trace, TraceTask

    client = EvalClientConfig(base_url=upstream, api_key_var=KEY_VAR)
    trace = Trace(task=TraceTask(type="bench", data={"i": i}), agent=AgentInfo(config={}))
    return RolloutSession(ctx=ModelContext(model="gpt-4.1-mini", client=client), trace=trace)


async def serve(upstream: str, sessions: int) -> None:
    from verifiers.v1.interception.server import InterceptionServer

    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)
    async with InterceptionServer() as server:
        opened = [server.register(session(upstream, i)) for i in range(sessions)]
        line = {
            "url": f"{server.base_url}/v1",
            "secrets": [model for model, _state in opened],
            "version": metadata.version("verifiers"),
        }
        sys.stdout.write(json.dumps(line) + "\n")
        sys.stdout.flush()
        await stop.wait()


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--upstream", required=True)
    parser.add_argument("--sessions", type=int, default=200)
    parser.add_argument("--uvloop", action="store_true")
    args = parser.parse_args()
    os.environ[KEY_VAR] = "x"
    factory = None
    if args.uvloop:
        import uvloop

        factory = uvloop.new_event_loop
    with asyncio.Runner(loop_factory=factory) as runner:
        runner.run(serve(args.upstream, args.sessions))


if __name__ == "__main__":
    main()
