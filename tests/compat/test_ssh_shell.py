"""`ToolAgent`'s SSH shell tool against a real asyncssh daemon behind a proctor capability.

The daemon is the compatibility layer's `Workspace` (asyncssh on 127.0.0.1, port 0),
started by the environment's initialize hook and published as HUD does (`ssh/2`, the
user, the daemon's host key, the client's private key, the cwd). The agent reaches it
only through the run's tunnel (`run.binding`).
"""

from __future__ import annotations

import dataclasses
import os
from collections.abc import AsyncGenerator, AsyncIterator
from pathlib import Path
from typing import Any

import pytest

from _support.waiting import until
from proctor import Environment, LocalRuntime, Run, Task, rollout
from proctor.agents import ToolAgent
from proctor.compat.hud.environment import Workspace
from proctor.testing import FakeModelServer, Reply

PROTOCOLS = ["ssh/2", "ssh"]


def make_env(root: Path, protocol: str = "ssh/2", host_key: str | None = None) -> Environment:
    """An environment serving `root` over SSH as capability `shell` (labelled `protocol`;
    published with `host_key` instead of the daemon's own, when given)."""
    env = Environment("ssh-env")
    workspace = Workspace(root)

    @env.initialize
    async def up() -> None:
        await workspace.start()
        cap = workspace.capability("shell")
        params = {**cap.params, "host_pubkey": host_key or cap.params["host_pubkey"]}
        env.add_capability(dataclasses.replace(cap, protocol=protocol, params=params))

    @env.shutdown
    async def down() -> None:
        await workspace.stop()

    @env.template
    async def edit(text: str = "hello") -> AsyncGenerator[Any, Any]:
        answer = yield {
            "prompt": f"Write {text!r} to out.txt.",
            "tools": [{"name": "echo_args", "description": "echo the arguments",
                       "command": "cat", "capability": "shell"}],
        }  # fmt: skip
        on_disk = (root / "out.txt").read_text() if (root / "out.txt").exists() else None
        yield 1.0 if on_disk == text and answer == "done" else 0.0

    return env


@pytest.fixture
async def runtime(tmp_path: Path, request: pytest.FixtureRequest) -> AsyncIterator[LocalRuntime]:
    protocol, host_key = getattr(request, "param", ("ssh/2", None))
    async with LocalRuntime(make_env(tmp_path / "ws", protocol, host_key)) as rt:
        yield rt


def make_task() -> Task:
    return Task(env="ssh-env", id="edit")


def results(run: Run) -> list[Any]:
    return [step for step in run.trace.steps if step.kind == "tool_result"]


@pytest.mark.parametrize("runtime", [(p, None) for p in PROTOCOLS], indirect=True)
async def test_commands_run_over_ssh_in_the_workspace(
    runtime: LocalRuntime, tmp_path: Path
) -> None:
    script = [
        Reply.tool("shell", command="printf hello > out.txt && pwd && exit 3"),
        Reply.tool("echo_args", one="two three"),
        Reply(text="done"),
    ]
    async with FakeModelServer(script) as fake:
        run = await rollout(make_task(), ToolAgent(f"fake/m@{fake.url}"), runtime=runtime)
        tools = {t["function"]["name"] for t in fake.requests[0].json["tools"]}
    assert run.error is None, run.error
    assert tools == {"shell", "echo_args"}
    shell, echoed = results(run)
    assert shell.content.startswith("exit code: 3")
    assert str((tmp_path / "ws").resolve()) in shell.content
    assert not shell.data["is_error"]  # a non-zero exit is an answer, not a failure
    assert echoed.content == 'exit code: 0\n--- stdout ---\n{"one":"two three"}'  # JSON stdin
    assert run.reward == 1.0


async def test_a_command_past_the_timeout_is_ended(runtime: LocalRuntime, tmp_path: Path) -> None:
    pid_file = tmp_path / "ws" / "pid"
    script = [Reply.tool("shell", command="echo started; echo $$ > pid; exec sleep 600")]
    async with FakeModelServer([*script, Reply(text="done")]) as fake:
        agent = ToolAgent(f"fake/m@{fake.url}", tool_timeout=1)
        run = await rollout(make_task(), agent, runtime=runtime)
    [result] = results(run)
    assert result.data["is_error"]
    assert "timed out" in result.content and "started" in result.content
    pid = int(pid_file.read_text())
    await until(lambda: not _alive(pid), f"the timed-out command (pid {pid}) ended")


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    return Path(f"/proc/{pid}/stat").read_text().split()[2] != "Z"


WRONG_KEY = "ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIK1ZlUbZ6bFvJ8ePdSq7RqUE3hZy2H5CM2dYkqG3tXwF"


@pytest.mark.parametrize("runtime", [("ssh/2", WRONG_KEY)], indirect=True)
async def test_a_daemon_with_another_host_key_is_refused(runtime: LocalRuntime) -> None:
    script = [Reply.tool("shell", command="printf hello > out.txt"), Reply(text="done")]
    async with FakeModelServer(script) as fake:
        run = await rollout(make_task(), ToolAgent(f"fake/m@{fake.url}"), runtime=runtime)
    [result] = results(run)
    assert result.data["is_error"]
    assert "host key" in result.content.lower()
    assert run.reward == 0.0
