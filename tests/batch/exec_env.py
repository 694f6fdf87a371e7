"""A workspace for the batch execution tests: an environment, agents, rows, a config.

(A uniquely named module, not `conftest`: the other batch tests live beside these.)
"""

from __future__ import annotations

import contextlib
import json
import socket
import textwrap
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

ENV = """
import os
from pathlib import Path

from proctor import Environment, graders

mini = Environment("mini", version="1.2.0")
HERE = Path(__file__).parent

if os.environ.get("EXEC_FLAKY"):  # a loopback port (`flaky_gate`): F fails this launch
    import socket

    with socket.create_connection(("127.0.0.1", int(os.environ["EXEC_FLAKY"]))) as gate:
        if gate.recv(1) == b"F":
            raise RuntimeError("flaky launch")


@mini.template
async def add(a: int, b: int):
    answer = yield f"What is {a} + {b}?"
    yield graders.numeric(answer, a + b)


@mini.template
async def echo(text: str):
    answer = yield f"Say {text}"
    yield graders.exact(answer, text)


@mini.template
async def broken():
    yield "Say anything"
    raise RuntimeError("grader boom")


@mini.template
async def leak():
    values = [os.environ.get(n, "") for n in ("OPENAI_API_KEY", "MY_SERVICE_TOKEN", "EXEC_SRV")]
    print("env sees", *values, flush=True)
    answer = yield "Repeat these: " + " ".join(values)
    yield graders.exact(answer, " ".join(values))
"""

SHUTDOWN_BOOM = """

@mini.shutdown
async def broken_shutdown():
    raise RuntimeError("shutdown boom")
"""

AGENTS = """
import asyncio
import os
import re
from pathlib import Path

HERE = Path(__file__).parent


async def solver(run):
    prompt = run.prompt or ""
    numbers = re.findall(r"-?\\d+", prompt)
    if prompt.startswith("What is"):
        run.answer = str(sum(int(n) for n in numbers))
    elif prompt.startswith("Say "):
        run.answer = prompt[4:]
    else:
        run.answer = prompt.partition(": ")[2]


async def boom(run):
    raise RuntimeError("agent boom")


async def leaky_boom(run):
    raise RuntimeError("cannot use key " + os.environ.get("OPENAI_API_KEY", ""))


async def leaky(run):
    values = [os.environ.get(n, "") for n in ("OPENAI_API_KEY", "MY_SERVICE_TOKEN", "EXEC_SRV")]
    print("agent sees", *values, flush=True)
    run.trace.add("assistant", "thinking about " + " ".join(values))
    run.answer = (run.prompt or "").partition(": ")[2]


async def blocker(run):
    (HERE / f"started-{run.slug}").write_text("")
    while not (HERE / "gate").exists():
        await asyncio.sleep(0.02)
    await solver(run)
"""

ROWS = [
    {"env": "mini", "id": "add", "args": {"a": 1, "b": 2}, "slug": "add-1-2"},
    {"env": "mini", "id": "add", "args": {"a": 3, "b": 4}, "slug": "add-3-4"},
    {"env": "mini", "id": "echo", "args": {"text": "hi"}, "slug": "echo-hi"},
]
BROKEN = {"env": "mini", "id": "broken", "args": {}, "slug": "broken"}
LEAK = {"env": "mini", "id": "leak", "args": {}, "slug": "leak"}


def workspace(root: Path, rows: list[dict[str, Any]] | None = None, env_extra: str = "") -> Path:
    """Write `env.py`, `agents.py` and `tasks.json` under `root`; returns `root`."""
    (root / "env.py").write_text(textwrap.dedent(ENV) + env_extra)
    (root / "agents.py").write_text(textwrap.dedent(AGENTS))
    (root / "tasks.json").write_text(json.dumps(ROWS if rows is None else rows, indent=2))
    return root


def config(**overrides: Any) -> dict[str, Any]:
    """A good config for the workspace: 3 rows x the solver agent, local runtime.

    The local runtime is `trusted`: these tests' own task code runs beside the keys
    some of them set (the plan refuses that otherwise; test_isolation.py shows it).
    """
    base: dict[str, Any] = {
        "name": "exec",
        "taskset": {"source": "tasks.json", "env_source": "env.py"},
        "agents": [{"kind": "python", "agent": "agents.py:solver"}],
        "runtime": {"kind": "local", "trusted": True},
        "max_concurrent": 2,
        "expected_rollouts": 3,
    }
    base.update(overrides)
    return base


@contextlib.contextmanager
def flaky_gate() -> Iterator[str]:
    """A loopback port whose first caller is told to fail (`F`), the others not (`K`):
    what the environment's launch asks under `EXEC_FLAKY` (a server process cannot
    leave a marker file: it sees the file system read-only)."""
    listener = socket.create_server(("127.0.0.1", 0))
    listener.settimeout(0.1)  # so the thread sees `done`
    answers = iter([b"F"])
    done = threading.Event()

    def serve() -> None:
        while not done.is_set():
            try:
                conn, _ = listener.accept()
            except TimeoutError:
                continue
            with conn:
                conn.sendall(next(answers, b"K"))

    thread = threading.Thread(target=serve, daemon=True)
    thread.start()
    try:
        yield str(listener.getsockname()[1])
    finally:
        done.set()
        thread.join()
        listener.close()


def write_config(root: Path, data: dict[str, Any], name: str = "batch.json") -> Path:
    """`data` as an indented JSON file under `root`."""
    path = root / name
    path.write_text(json.dumps(data, indent=2))
    return path
