"""`SubprocessRuntime`: port lines, output routing, launch errors, process-group teardown."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import signal
import socket
import stat
import subprocess
import sys
import textwrap
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from proctor import RemoteError, RuntimeLaunchError, Task
from proctor.agents import agent_from_fn
from proctor.channel import connect
from proctor.engine import rollout
from proctor.runtimes import SubprocessRuntime

TASK = Task(env="subprocess-env", id="echo", args={"text": "hi"})

ENV_SOURCE = """
import os
from proctor import Environment

env = Environment("subprocess-env")


@env.template
async def echo(text: str):
    answer = yield text
    yield 1.0 if answer == text else 0.0


@env.template
async def where():
    yield f"{os.environ.get('PROCTOR_TEST_VALUE')}|{os.getcwd()}"
    yield 1.0


@env.template
async def token_seen():
    import subprocess
    child = subprocess.run(["sh", "-c", "echo ${PROCTOR_TOKEN:-unset}"], capture_output=True)
    yield f"{os.environ.get('PROCTOR_TOKEN', 'unset')}|{child.stdout.decode().strip()}"
    yield 1.0
"""

# A stand-in server: prints what it is told, then a port line, then waits.
FAKE_SERVER = """
import os, signal, socket, subprocess, sys, time
args = sys.argv[1:]
if "ignore-term" in args:
    signal.signal(signal.SIGTERM, signal.SIG_IGN)
signal.pthread_sigmask(signal.SIG_BLOCK, [signal.SIGTERM])  # until it said it all
if "last-words" in args:
    def bye(*_):
        sys.stderr.write("last words\\n"); sys.stderr.flush(); sys.exit(0)
    signal.signal(signal.SIGTERM, bye)
if "grandchild" in args or "escaped-grandchild" in args:
    code = "import signal, time; signal.signal(signal.SIGTERM, signal.SIG_IGN); time.sleep(60)"
    g = subprocess.Popen([sys.executable, "-c", code, __file__],  # named: found by the test
                         start_new_session="escaped-grandchild" in args)
print("hello on stdout", flush=True)
sys.stderr.write("hello on stderr\\n"); sys.stderr.flush()
if "big-line" in args:
    sys.stderr.write("x" * 300_000 + "\\n"); sys.stderr.flush()
if "bad-port" in args:
    print("PROCTOR_SERVE_PORT=eighty", flush=True)
if "silent" not in args:
    s = socket.socket(); s.bind(("127.0.0.1", 0)); s.listen()
    prefix = "HUD_SERVE_PORT=" if "hud" in args else "PROCTOR_SERVE_PORT="
    print(f"{prefix}{s.getsockname()[1]}", flush=True)
    print("after the port", flush=True)
signal.pthread_sigmask(signal.SIG_UNBLOCK, [signal.SIGTERM])
while True:
    time.sleep(0.05)
"""


@pytest.fixture
def source(tmp_path: Path) -> Path:
    path = tmp_path / "subprocess_env.py"
    path.write_text(ENV_SOURCE)
    return path


@pytest.fixture
def pids_file(tmp_path: Path) -> Iterator[Path]:
    """The fake server's path: its processes are found by it (`read_pids`)."""
    path = tmp_path / "fake_server.py"
    yield path
    for pid in read_pids(path):  # never leave a test's processes behind, pass or fail
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGKILL)


def fake(tmp_path: Path, *args: str) -> list[str]:
    script = tmp_path / "fake_server.py"
    script.write_text(FAKE_SERVER)
    return [sys.executable, str(script), *args]


def read_pids(script: Path) -> list[int]:
    """Host pids of the running fake server and its grandchild, oldest first.

    They run in a pid namespace of their own (their own pids mean nothing here): found
    by their command lines, which name the script (its walls' processes excluded).
    """
    found = []
    for entry in os.listdir("/proc"):
        try:
            cmdline = Path(f"/proc/{entry}/cmdline").read_bytes()
            started = int(Path(f"/proc/{entry}/stat").read_text().rsplit(")", 1)[1].split()[19])
        except (OSError, ValueError):
            continue
        if (
            str(script).encode() in cmdline
            and b"_isolate.py" not in cmdline
            and not gone(int(entry))
        ):
            found.append((started, int(entry)))
    return [pid for _, pid in sorted(found)]


def gone(pid: int) -> bool:
    """No such process, or only an unreaped zombie (it no longer runs)."""
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except OSError:
        return True
    return state == "Z"


async def both_pids(script: Path) -> list[int]:
    """The server's and its grandchild's host pids, once both run the script: the
    server announces its port without waiting for its grandchild's exec."""
    assert await poll(lambda: len(read_pids(script)) == 2, within=30.0), read_pids(script)
    return read_pids(script)


async def poll(check: Callable[[], object], within: float = 5.0) -> bool:
    """Whether `check()` comes true within `within` seconds."""
    deadline = time.monotonic() + within
    while time.monotonic() < deadline:
        if check():
            return True
        await asyncio.sleep(0.01)
    return bool(check())


async def wait_gone(pid: int, within: float = 3.0) -> bool:
    return await poll(lambda: gone(pid), within)


# --- the port line ------------------------------------------------------------------------


async def test_serves_a_source_and_grades(source: Path) -> None:
    runtime = SubprocessRuntime(source)
    run = await rollout(TASK, agent_from_fn(lambda p: p), runtime=runtime)
    assert run.status == "completed" and run.reward == 1.0, run.error


async def test_reads_a_hud_port_line(tmp_path: Path, pids_file: Path) -> None:
    runtime = SubprocessRuntime(command=fake(tmp_path, "hud"))
    async with runtime(TASK) as endpoint:
        assert endpoint.url.startswith("tcp://127.0.0.1:")
        port = int(endpoint.url.rsplit(":", 1)[1])
        with socket.create_connection(("127.0.0.1", port), timeout=2):
            pass  # the fake's listener is there


async def test_a_bad_port_line_is_a_launch_error(tmp_path: Path, pids_file: Path) -> None:
    runtime = SubprocessRuntime(command=fake(tmp_path, "bad-port"))
    with pytest.raises(RuntimeLaunchError, match="bad port line"):
        async with runtime(TASK):
            pass
    assert await poll(lambda: not read_pids(pids_file))


# --- output -------------------------------------------------------------------------------


async def test_other_output_goes_to_the_log_file(tmp_path: Path, pids_file: Path) -> None:
    log = tmp_path / "child.log"
    runtime = SubprocessRuntime(command=fake(tmp_path, "last-words"), log=log)
    async with runtime(TASK):
        pass
    text = log.read_text()
    for line in ("hello on stdout", "hello on stderr", "after the port", "last words"):
        assert f"{line}\n" in text
    assert "SERVE_PORT" not in text


async def test_output_goes_to_the_debug_log_without_a_file(
    tmp_path: Path, pids_file: Path, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.DEBUG, logger="proctor.runtimes.subprocess")
    async with SubprocessRuntime(command=fake(tmp_path, "last-words"))(TASK):
        pass
    messages = [r.getMessage() for r in caplog.records]
    assert any(m.endswith("stderr] hello on stderr") for m in messages), messages
    assert any(m.endswith("stderr] last words") for m in messages), messages


async def test_a_huge_output_line_does_not_stall_the_child(tmp_path: Path, pids_file: Path) -> None:
    log = tmp_path / "child.log"
    runtime = SubprocessRuntime(command=fake(tmp_path, "big-line"), log=log, startup_timeout=10)
    t0 = time.monotonic()
    async with runtime(TASK):
        assert time.monotonic() - t0 < 5
    assert log.read_text().count("x") == 300_000


async def test_an_unwritable_log_is_a_launch_error(tmp_path: Path, source: Path) -> None:
    runtime = SubprocessRuntime(source, log=tmp_path / "no" / "such" / "dir.log")
    with pytest.raises(RuntimeLaunchError, match="log file"):
        async with runtime(TASK):
            pass


# --- launch failures ------------------------------------------------------------------------


async def test_a_child_that_dies_reports_the_tail_of_its_stderr(tmp_path: Path) -> None:
    broken = tmp_path / "broken_env.py"
    broken.write_text("raise RuntimeError('kaboom at import')\n")
    t0 = time.monotonic()
    with pytest.raises(RuntimeLaunchError) as info:
        async with SubprocessRuntime(broken)(TASK):
            pass
    assert time.monotonic() - t0 < 5
    message = str(info.value)
    assert "exited with code 1 before announcing a port" in message
    assert "kaboom at import" in message and "stderr (last lines)" in message
    assert "broken_env.py" in message


async def test_startup_timeout(tmp_path: Path, pids_file: Path) -> None:
    # Long enough for its first stderr line on a loaded machine (it starts behind walls).
    runtime = SubprocessRuntime(command=fake(tmp_path, "silent"), startup_timeout=1.5)
    t0 = time.monotonic()
    with pytest.raises(RuntimeLaunchError, match=r"no port announced within 1.5s") as info:
        async with runtime(TASK):
            pass
    assert time.monotonic() - t0 < 10
    assert "hello on stderr" in str(info.value)
    assert await poll(lambda: not read_pids(pids_file))


async def test_a_missing_interpreter_is_a_launch_error(source: Path) -> None:
    runtime = SubprocessRuntime(source, python="/no/such/python")
    with pytest.raises(RuntimeLaunchError, match="cannot start /no/such/python"):
        async with runtime(TASK):
            pass


# --- stopping -------------------------------------------------------------------------------


async def test_the_whole_process_group_is_killed_after_stop_timeout(
    tmp_path: Path, pids_file: Path, caplog: pytest.LogCaptureFixture
) -> None:
    runtime = SubprocessRuntime(
        command=fake(tmp_path, "ignore-term", "grandchild"), stop_timeout=0.3
    )
    async with runtime(TASK):
        child, grandchild = await both_pids(pids_file)
        assert not gone(child) and not gone(grandchild)
        t0 = time.monotonic()
    assert 0.3 <= time.monotonic() - t0 < 3
    assert gone(child)
    assert await wait_gone(grandchild)
    assert "ignored SIGTERM for 0.3s; killing" in caplog.text


async def test_grandchildren_in_the_group_go_with_a_clean_exit(
    tmp_path: Path, pids_file: Path
) -> None:
    async with SubprocessRuntime(command=fake(tmp_path, "grandchild"), stop_timeout=5)(TASK):
        child, grandchild = await both_pids(pids_file)
        t0 = time.monotonic()
    assert time.monotonic() - t0 < 2  # the child obeyed SIGTERM; the rest was killed
    assert gone(child)
    assert await wait_gone(grandchild)


async def test_an_escaped_grandchild_holding_the_pipes_does_not_look_like_a_hang(
    tmp_path: Path, pids_file: Path, caplog: pytest.LogCaptureFixture
) -> None:
    command = fake(tmp_path, "escaped-grandchild")
    async with SubprocessRuntime(command=command, stop_timeout=5)(TASK):
        child, _ = await both_pids(pids_file)
        t0 = time.monotonic()
    assert time.monotonic() - t0 < 2
    assert gone(child)
    assert "ignored SIGTERM" not in caplog.text


async def test_cancelled_while_starting_leaves_nothing(tmp_path: Path, pids_file: Path) -> None:
    runtime = SubprocessRuntime(command=fake(tmp_path, "silent"))

    async def enter() -> None:
        async with runtime(TASK):
            pass  # pragma: no cover

    entering = asyncio.create_task(enter())
    assert await poll(lambda: read_pids(pids_file))
    entering.cancel()
    with pytest.raises(asyncio.CancelledError):
        await entering
    assert await poll(lambda: not read_pids(pids_file))


# --- options --------------------------------------------------------------------------------


async def test_python_env_and_cwd_are_honoured(tmp_path: Path, source: Path) -> None:
    log = tmp_path / "child.log"
    wrapper = tmp_path / "python-wrapper"
    wrapper.write_text(
        textwrap.dedent(f"""\
            #!/bin/sh
            echo "wrapper: $@" >&2
            exec {sys.executable} "$@"
            """)
    )
    wrapper.chmod(wrapper.stat().st_mode | stat.S_IEXEC)
    workdir = tmp_path / "work"
    workdir.mkdir()
    runtime = SubprocessRuntime(
        source,
        python=str(wrapper),
        env={"PROCTOR_TEST_VALUE": "from-the-runtime"},
        cwd=workdir,
        log=log,
    )
    run = await rollout(
        Task(env="subprocess-env", id="where"), agent_from_fn(lambda p: p), runtime=runtime
    )
    assert run.status == "completed", run.error
    assert run.prompt == f"from-the-runtime|{workdir}"
    assert "wrapper: -m proctor.serve " + f"{source} --token-env PROCTOR_TOKEN" in log.read_text()


def test_argv_and_construction(source: Path) -> None:
    runtime = SubprocessRuntime(source, env_name="subprocess-env", python="py")
    assert runtime.argv() == [
        "py", "-m", "proctor.serve", str(source), "--token-env", "PROCTOR_TOKEN",
        "--env", "subprocess-env",
    ]  # fmt: skip
    assert SubprocessRuntime(command=["serve", "it"]).argv() == ["serve", "it"]
    assert repr(SubprocessRuntime(command=["serve"])) == "SubprocessRuntime(['serve'])"
    with pytest.raises(ValueError, match="source or a command"):
        SubprocessRuntime()


# --- the driver's death ---------------------------------------------------------------------

DRIVER = """
import asyncio, contextlib, sys
from proctor import Task
from proctor.runtimes import SubprocessRuntime

async def main():
    runtime = SubprocessRuntime(sys.argv[1])
    task = Task(env="subprocess-env", id="echo", args={"text": "hi"})
    async with contextlib.AsyncExitStack() as stack:
        for _ in range(3):
            await stack.enter_async_context(runtime(task))
        print("serving", flush=True)
        await asyncio.sleep(600)

asyncio.run(main())
"""


def children_of(parent: int) -> list[int]:
    found = []
    for entry in os.scandir("/proc"):
        with contextlib.suppress(OSError):
            stat = Path(entry.path, "stat").read_text()
            if entry.name.isdigit() and int(stat[stat.rindex(")") + 2 :].split()[1]) == parent:
                found.append(int(entry.name))
    return found


async def test_cold_children_die_with_a_killed_driver(tmp_path: Path, source: Path) -> None:
    script = tmp_path / "driver.py"
    script.write_text(DRIVER)
    driver = subprocess.Popen(  # noqa: ASYNC220 - reads one line, then is killed
        [sys.executable, str(script), str(source)], stdout=subprocess.PIPE, text=True
    )
    servers: list[int] = []
    try:
        assert driver.stdout is not None
        assert driver.stdout.readline() == "serving\n"
        servers = children_of(driver.pid)
        assert len(servers) == 3
    finally:
        driver.kill()
        driver.wait()
        driver.stdout and driver.stdout.close()
    try:
        assert await poll(lambda: all(gone(pid) for pid in servers), 5.0), [
            pid for pid in servers if not gone(pid)
        ]
    finally:
        for pid in servers:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)


async def test_the_token_is_required_and_hidden_from_what_the_environment_runs(
    source: Path,
) -> None:
    runtime = SubprocessRuntime(source)
    task = Task(env="subprocess-env", id="token_seen")
    async with runtime(task) as ep:
        assert ep.token and ep.token not in repr(ep)
        with pytest.raises(RemoteError, match="unauthorized"):
            async with connect(ep.url):
                pass
    run = await rollout(task, agent_from_fn(lambda p: p), runtime=runtime)
    assert run.prompt == "unset|unset"
