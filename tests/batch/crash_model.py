"""A fake model server for the crash-resume test, in its own process (it must outlive
killed runners): `python crash_model.py LOG`.

Each rollout's first turn asks for a shell command, the second answers `done-<n>`.
Every request is appended to LOG (one line: the SHA-256 of its messages) *before* it
is answered, so a request sent by a runner killed mid-turn is counted too: the same
line twice means a model turn was charged twice. Replies take 0-60 ms, so kills land
with turns in flight. Prints `{"url": ...}` once bound; serves until SIGTERM.
"""

from __future__ import annotations

import asyncio
import hashlib
import json
import os
import random
import re
import signal
import sys

from proctor.testing import FakeModelServer, Reply


def main(log_path: str) -> None:
    log = os.open(log_path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)

    async def policy(request):
        messages = (request.json or {}).get("messages") or []
        digest = hashlib.sha256(json.dumps(messages, sort_keys=True).encode()).hexdigest()
        os.write(log, (digest + "\n").encode())
        await asyncio.sleep(random.uniform(0, 0.06))
        if messages and messages[-1].get("role") == "tool":
            n = re.search(r"job (\d+)", str(messages[0].get("content")))
            return f"done-{n[1] if n else '?'}"
        return Reply.tool("shell", command="sleep 0.1; echo ran")

    async def serve() -> None:
        stop = asyncio.Event()
        loop = asyncio.get_running_loop()
        loop.add_signal_handler(signal.SIGTERM, stop.set)
        async with FakeModelServer(policy, record=False, models=["gpt-4.1-mini"]) as fake:
            print(json.dumps({"url": fake.url}), flush=True)
            await stop.wait()

    asyncio.run(serve())


if __name__ == "__main__":
    main(sys.argv[1])
