"""Tracebacks of user code reach the run record: a template's over the wire, an agent's
locally; bounded, and with secret values redacted."""

from __future__ import annotations

import asyncio
import json
import logging
import os
import re
import sys
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest

from proctor import RemoteError
from proctor._loader import find_environment
from proctor.agents import Run, agent_from_fn
from proctor.channel import EnvServer, connect
from proctor.engine import execute_run, rollout
from proctor.env import Environment
from proctor.runtimes import LocalRuntime, SubprocessRuntime

MAX = 16 * 1024
SECRET = "tok-0123456789abcdef"

ENV_SOURCE = """\
import os

from proctor.env import Environment

env = Environment("engine-tracebacks")


@env.template
async def explode():
    raise RuntimeError("boom " + os.environ.get("TB_SECRET_TOKEN", "-"))  # START
    yield


@env.template
async def explode_in_grading():
    yield "say anything"
    raise KeyError("rubric")  # GRADE


@env.template
async def huge():
    raise ValueError("x" * 100_000)  # HUGE
    yield
"""


def line_of(text: str, marker: str) -> int:
    """The 1-based line of `text` that holds `# marker`."""
    return next(i for i, line in enumerate(text.splitlines(), 1) if f"# {marker}" in line)


def names(traceback: str, path: Path | str, marker: str, source: str) -> bool:
    """`traceback` has the frame at `path`'s line holding `# marker`."""
    frame = f'File "{path}", line {line_of(source, marker)}'
    return frame in traceback


@pytest.fixture(scope="module")
def env_file(tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("tb") / "tb_env.py"
    path.write_text(ENV_SOURCE)
    return path


@pytest.fixture(scope="module")
def env(env_file: Path) -> Environment:
    return find_environment(env_file)


@pytest.fixture
async def server(env: Environment) -> AsyncIterator[EnvServer]:
    srv = EnvServer(env)
    try:
        yield srv
    finally:
        await srv.aclose()


echo = agent_from_fn(lambda prompt: prompt)
AGENT_FILE = Path(__file__).read_text()


async def dividing_agent(run: Run) -> None:
    run.answer = 1 / 0  # AGENT


async def leaking_agent(run: Run) -> None:
    raise ValueError(f"cannot use {os.environ['TB_SECRET_TOKEN']}")  # LEAK


def _deep(n: int) -> None:
    if n == 0:
        raise RuntimeError("deep")  # DEEP
    _deep(n - 1)


async def deep_agent(run: Run) -> None:
    _deep(200)


async def huge_agent(run: Run) -> None:
    raise ValueError("y" * 100_000)


# --- a template that raises ------------------------------------------------------------


@pytest.mark.parametrize("where", ["local", "subprocess"])
async def test_a_template_raising_names_its_file_and_line(
    env: Environment, env_file: Path, where: str
) -> None:
    runtime = LocalRuntime(env) if where == "local" else SubprocessRuntime(env_file)
    run = await rollout(env.tasks["explode"](), echo, runtime=runtime)
    assert run.status == "failed" and run.error is not None
    assert (run.error.phase, run.error.type) == ("starting", "RemoteError")
    tb = run.error.traceback
    assert tb is not None and names(tb, env_file, "START", ENV_SOURCE), tb
    assert "RuntimeError: boom -" in tb
    # the server's traceback first, then this side's (the client raising RemoteError)
    server, _, local = tb.partition("The environment server answered with that error")
    assert "tb_env.py" in server and "RemoteError" in local and "tb_env.py" not in local
    assert run.to_dict()["error"]["traceback"] == tb


async def test_a_template_raising_while_grading_names_its_line(
    env: Environment, env_file: Path
) -> None:
    run = await rollout(env.tasks["explode_in_grading"](), echo, runtime=LocalRuntime(env))
    assert run.error is not None and run.error.phase == "grading"
    assert run.error.traceback is not None
    assert names(run.error.traceback, env_file, "GRADE", ENV_SOURCE), run.error.traceback
    assert "KeyError: 'rubric'" in run.error.traceback


# --- an agent that raises --------------------------------------------------------------


async def test_an_agent_raising_names_its_file_and_line(env: Environment) -> None:
    run = await rollout(
        env.tasks["explode_in_grading"](), dividing_agent, runtime=LocalRuntime(env)
    )
    assert run.error is not None
    assert (run.error.phase, run.error.type) == ("agent", "ZeroDivisionError")
    tb = run.error.traceback
    assert tb is not None and names(tb, __file__, "AGENT", AGENT_FILE), tb
    assert tb.rstrip().endswith("ZeroDivisionError: division by zero")
    assert "environment server" not in tb  # no remote part for a local error
    record = json.loads(json.dumps(run.to_dict()))
    assert record["error"] == {
        "phase": "agent",
        "type": "ZeroDivisionError",
        "message": "division by zero",
        "traceback": tb,
    }


async def test_a_cancelled_run_keeps_no_traceback(env: Environment) -> None:
    entered = asyncio.Event()

    async def waits(run: Run) -> None:
        entered.set()
        await asyncio.Event().wait()

    run = Run(env.tasks["explode_in_grading"]())
    task = asyncio.ensure_future(execute_run(run, waits, runtime=LocalRuntime(env)))
    await entered.wait()
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    assert run.error is not None and run.error.type == "CancelledError"
    assert run.error.traceback is None


# --- secrets ---------------------------------------------------------------------------


async def test_a_secret_in_an_agents_exception_is_redacted(
    env: Environment, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("TB_SECRET_TOKEN", SECRET)
    run = await rollout(env.tasks["explode_in_grading"](), leaking_agent, runtime=LocalRuntime(env))
    assert run.error is not None and run.error.traceback is not None
    assert run.error.message == "cannot use [redacted]"
    assert "ValueError: cannot use [redacted]" in run.error.traceback
    assert SECRET not in json.dumps(run.to_dict())


@pytest.mark.parametrize("where", ["local", "subprocess"])
async def test_a_secret_in_a_templates_exception_is_redacted(
    env: Environment,
    env_file: Path,
    where: str,
    monkeypatch: pytest.MonkeyPatch,
    caplog: pytest.LogCaptureFixture,
) -> None:
    caplog.set_level(logging.INFO, "proctor.channel")
    if where == "local":
        monkeypatch.setenv("TB_SECRET_TOKEN", SECRET)
        runtime: Any = LocalRuntime(env)
    else:  # only the server knows the secret: it redacts what it sends by itself
        monkeypatch.delenv("TB_SECRET_TOKEN", raising=False)
        runtime = SubprocessRuntime(env_file, env={"TB_SECRET_TOKEN": SECRET})
    run = await rollout(env.tasks["explode"](), echo, runtime=runtime)
    assert run.error is not None and run.error.traceback is not None
    assert "boom [redacted]" in run.error.message
    assert "RuntimeError: boom [redacted]" in run.error.traceback
    assert SECRET not in json.dumps(run.to_dict())
    if where == "local":  # the server's log too (a child logs only warnings and up)
        assert "boom [redacted]" in caplog.text and SECRET not in caplog.text


# --- bounds ----------------------------------------------------------------------------


async def test_a_deep_traceback_keeps_the_innermost_frames(env: Environment) -> None:
    run = await rollout(env.tasks["explode_in_grading"](), deep_agent, runtime=LocalRuntime(env))
    assert run.error is not None and run.error.traceback is not None
    tb = run.error.traceback
    assert tb.count('  File "') <= 30
    assert names(tb, __file__, "DEEP", AGENT_FILE)
    assert len(tb.encode()) <= MAX


@pytest.mark.parametrize("where", ["agent", "template"])
async def test_a_huge_traceback_is_cut_to_16_kib(
    env: Environment, env_file: Path, where: str
) -> None:
    if where == "agent":
        run = await rollout(
            env.tasks["explode_in_grading"](), huge_agent, runtime=LocalRuntime(env)
        )
        frame, end = f'File "{__file__}"', "yyyy\n"  # the message's end
    else:
        run = await rollout(env.tasks["huge"](), echo, runtime=LocalRuntime(env))
        frame = f'File "{env_file}", line {line_of(ENV_SOURCE, "HUGE")}'
        end = "The environment server answered with that error"  # this side's part
    assert run.error is not None and run.error.traceback is not None
    tb = run.error.traceback
    assert len(tb.encode()) <= MAX
    assert re.search(r"\[\.\.\. \d+ bytes of traceback cut \.\.\.\]", tb)
    assert tb.startswith("Traceback (most recent call last):")
    assert frame in tb  # the frames survive the cut: it falls in the message
    assert end in tb[MAX // 2 :]


# --- the wire --------------------------------------------------------------------------


async def test_the_error_frame_carries_data_traceback(server: EnvServer, env_file: Path) -> None:
    host, port = await server.tcp_address()
    reader, writer = await asyncio.open_connection(host, port)
    try:
        writer.write(b'{"jsonrpc":"2.0","id":1,"method":"tasks.start","params":{"id":"explode"}}\n')
        line = await asyncio.wait_for(reader.readline(), 5)
        assert line.startswith(
            b'{"jsonrpc":"2.0","id":1,"error":{"code":-32000,'
            b'"message":"explode: RuntimeError: boom -",'
            b'"data":{"traceback":"Traceback (most recent call last):\\n'
        ), line
        assert line.endswith(b'RuntimeError: boom -\\n"}}}\n'), line
        tb = json.loads(line)["error"]["data"]["traceback"]
        assert names(tb, env_file, "START", ENV_SOURCE)
        # a client's mistake is answered as before: no data
        writer.write(b'{"jsonrpc":"2.0","id":2,"method":"tasks.start","params":{"id":"nope"}}\n')
        assert await asyncio.wait_for(reader.readline(), 5) == (
            b'{"jsonrpc":"2.0","id":2,"error":{"code":-32602,'
            b'"message":"tasks.start: unknown task \'nope\'"}}\n'
        )
    finally:
        writer.close()


async def test_the_client_keeps_the_traceback_on_remote_error(
    server: EnvServer, env_file: Path
) -> None:
    host, port = await server.tcp_address()
    async with connect(f"tcp://{host}:{port}") as client:
        with pytest.raises(RemoteError) as caught:
            await client.start_task("explode", {})
    assert caught.value.message == "explode: RuntimeError: boom -"
    assert names(caught.value.data["traceback"], env_file, "START", ENV_SOURCE)


# --- the CLI ---------------------------------------------------------------------------


@pytest.mark.parametrize("debug", [True, False])
async def test_proctor_debug_prints_the_servers_traceback(
    server: EnvServer, env_file: Path, tmp_path: Path, debug: bool
) -> None:
    host, port = await server.tcp_address()
    environ = {k: v for k, v in os.environ.items() if k != "PROCTOR_DEBUG"}
    environ["XDG_RUNTIME_DIR"] = str(tmp_path)
    if debug:
        environ["PROCTOR_DEBUG"] = "1"
    proc = await asyncio.create_subprocess_exec(
        sys.executable,
        "-m",
        "proctor.cli",
        "task",
        "start",
        "explode",
        "--url",
        f"tcp://{host}:{port}",
        env=environ,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
    )
    try:
        _, err = await asyncio.wait_for(proc.communicate(), 60)
    finally:
        if proc.returncode is None:
            proc.kill()
            await proc.wait()
    stderr = err.decode()
    assert proc.returncode == 1, stderr
    if debug:
        assert stderr.startswith("The environment server's traceback:\n"), stderr
        assert names(stderr, env_file, "START", ENV_SOURCE), stderr
        assert stderr.rstrip().endswith("RemoteError: [-32000] explode: RuntimeError: boom -")
    else:
        assert stderr == "error: explode: RuntimeError: boom -\n"
