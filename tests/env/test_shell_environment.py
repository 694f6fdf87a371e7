"""An agent's shell commands never see the driver's keys (issue 8, review after finding 2).

The jailed harness reached the shell capability, and the shell ran with the environment
server's whole environment: in-process (LocalRuntime) and in a SubprocessRuntime child
that was the driver's, provider keys included. Commands now get an allowlist.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from proctor import SubprocessRuntime, Task
from proctor.agents import Run
from proctor.engine import rollout
from proctor.env import ShellClient, ShellServer

SECRET = "sk-driver-secret-in-the-environment"


async def test_shell_commands_get_an_allowlist_and_what_was_named(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("OPENAI_API_KEY", SECRET)
    monkeypatch.setenv("INNOCENT_NAME", SECRET)
    monkeypatch.setenv("WANTED", "by-name")
    monkeypatch.setenv("LC_ALL", "C")
    server = ShellServer(env={"GIVEN": "given"}, pass_env=["WANTED"])
    await server.start()
    try:
        for result in (await server.run("env"), await ShellClient(server.url).run("env")):
            assert result.exit_code == 0
            assert SECRET not in result.stdout
            lines = set(result.stdout.splitlines())
            assert {"GIVEN=given", "WANTED=by-name", "LC_ALL=C"} <= lines
            assert any(line.startswith("PATH=") for line in lines)
    finally:
        await server.aclose()


SHELL_ENV = """
from proctor import Environment

env = Environment("shell-env")
env.add_shell()

@env.template
async def look():
    answer = yield "run env"
    yield 1.0
"""


async def test_a_subprocess_server_and_its_shell_never_see_the_driver_keys(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("OPENAI_API_KEY", SECRET)
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", SECRET)
    source = tmp_path / "shell_env.py"
    source.write_text(SHELL_ENV)
    seen: list[str] = []

    async def look(run: Run) -> None:
        result = await ShellClient(run.binding("shell").url).run("env; cat /proc/$PPID/environ")
        seen.append(result.stdout)
        run.trace.content = "done"

    for warm in (0, 1):
        runtime = SubprocessRuntime(source, warm=warm)
        async with runtime:
            run = await rollout(Task(env="shell-env", id="look"), look, runtime=runtime)
        assert run.error is None, run.error
    assert len(seen) == 2 and all("PATH=" in out for out in seen)
    assert [out for out in seen if SECRET in out] == []
