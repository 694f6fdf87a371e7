"""Graders that run something in the substrate: `command`, `run`, `run_uv_script`.

Real processes throughout; the uv tests install a small package from the package index
into a temporary uv cache (skipped, with uv's reason, when the index is unreachable).
"""

from __future__ import annotations

import importlib.util
import sys
from collections.abc import AsyncGenerator, AsyncIterator
from pathlib import Path
from typing import Any

import pytest

from _support.waiting import until
from proctor import Environment, Run, Task, rollout
from proctor.env import ShellClient, ShellResult, ShellServer, graders
from proctor.runtimes import LocalRuntime

SECRET = "sk-driver-secret-never-in-a-grader"


def _gone(pid: int) -> bool:
    """The process is gone or a zombie (killed, not yet reaped by its new parent)."""
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] == "Z"
    except FileNotFoundError:
        return True


# -- command and run ------------------------------------------------------------------


async def test_command_scores_the_exit_code() -> None:
    assert await graders.command("true") == 1.0
    assert await graders.command("exit 3") == 0.0
    assert await graders.command("exit 3", expect_exit=3) == 1.0


@pytest.mark.parametrize(
    ("match", "expected", "score"),
    [
        ("contains", "7 passed", 1.0),
        ("contains", "8 passed", 0.0),
        ("regex", r"^\d+ passed in", 1.0),
        ("regex", r"^passed", 0.0),
        ("exact", "collected\n7 passed in 0.1s", 1.0),
        ("exact", "7 passed in 0.1s", 0.0),
    ],
)
async def test_command_scores_the_output(match: Any, expected: str, score: float) -> None:
    cmd = "printf 'collected\\n7 passed in 0.1s\\n'"
    assert await graders.command(cmd, expect_output=expected, match=match) == score


async def test_command_checks_exit_and_output_together() -> None:
    cmd = "echo ok; exit 1"
    assert await graders.command(cmd, expect_output="ok") == 0.0
    assert await graders.command(cmd, expect_output="ok", expect_exit=None) == 1.0
    assert await graders.command(cmd, expect_output="ok", expect_exit=1) == 1.0


async def test_command_refuses_to_check_nothing_or_an_unknown_match() -> None:
    with pytest.raises(ValueError, match="checks nothing"):
        await graders.command("true", expect_exit=None)
    with pytest.raises(ValueError, match="'contains', 'regex' or 'exact'"):
        await graders.command("true", expect_output="x", match="glob")  # type: ignore[arg-type]


async def test_a_timed_out_command_scores_zero_and_its_process_group_is_killed(
    tmp_path: Path,
) -> None:
    pidfile = tmp_path / "pid"
    cmd = f"sleep 300 & echo $! > {pidfile}; wait"
    assert await graders.command(cmd, timeout=0.5, expect_exit=None, expect_output="") == 0.0
    result = await graders.run(cmd, timeout=0.5)
    assert result.timed_out and result.exit_code == -9
    await until(lambda: _gone(int(pidfile.read_text())), "the background sleep was killed")


async def test_nothing_a_command_started_outlives_it(tmp_path: Path) -> None:
    pidfile = tmp_path / "pid"
    result = await graders.run(f"(sleep 300 >/dev/null 2>&1 & echo $! > {pidfile}); echo done")
    assert result.ok and result.stdout == "done\n"
    await until(lambda: _gone(int(pidfile.read_text())), "the background sleep was killed")


async def test_run_caps_the_output_keeping_head_and_tail() -> None:
    result = await graders.run("head -c 100000 /dev/zero | tr '\\0' x; echo END", max_output=1000)
    assert result.truncated and result.ok
    assert result.stdout.startswith("x" * 400) and result.stdout.endswith("END\n")
    assert "bytes omitted" in result.stdout and len(result.stdout) < 1100


async def test_run_in_a_directory_and_a_missing_one_is_an_error(tmp_path: Path) -> None:
    (tmp_path / "answer.txt").write_text("42\n")
    assert await graders.command("cat answer.txt", cwd=tmp_path, expect_output="42") == 1.0
    with pytest.raises(FileNotFoundError, match="not a directory"):
        await graders.run("true", cwd=tmp_path / "missing")


async def test_a_local_command_never_sees_the_driver_keys(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("OPENAI_API_KEY", SECRET)
    result = await graders.run("env")
    assert result.ok and SECRET not in result.stdout
    assert any(line.startswith("PATH=") for line in result.stdout.splitlines())


@pytest.fixture
async def shell(tmp_path: Path) -> AsyncIterator[ShellServer]:
    (tmp_path / "data.txt").write_text("from the shell's folder\n")
    async with ShellServer(cwd=tmp_path) as server:
        yield server


async def test_command_runs_through_the_environments_shell(shell: ShellServer) -> None:
    assert await graders.command("cat data.txt", shell=shell, expect_output="shell's") == 1.0
    result = await graders.run("pwd", shell=shell)
    assert isinstance(result, ShellResult) and result.stdout.strip() == str(shell.cwd)
    assert (await graders.run("sleep 300", shell=shell, timeout=0.5)).timed_out


# -- run_uv_script ----------------------------------------------------------------------

TABULATE = """\
# /// script
# dependencies = ["tabulate"]
# ///
import sys
from tabulate import tabulate

print(tabulate([sys.argv[1:]], tablefmt="plain"))
"""

ENV_DUMP = """\
# /// script
# dependencies = []
# ///
import os

for name in sorted(os.environ):
    print(f"{name}={os.environ[name]}")
"""


@pytest.fixture(scope="module")
def uv_cache(tmp_path_factory: pytest.TempPathFactory) -> str:
    """A uv cache of this module's own, so the driver's default cache is left alone."""
    return str(tmp_path_factory.mktemp("uv-cache"))


def _cached(cache: str, package: str) -> bool:
    return any(Path(cache).rglob(f"{package}/__init__.py"))


def _environments(cache: str) -> set[Path]:
    """The environments uv keeps in `cache` (one per script path)."""
    return {env for folder in Path(cache).glob("environments*") for env in folder.iterdir()}


def _skip_if_offline(result: ShellResult) -> None:
    if result.exit_code != 0 and "Failed to fetch" in result.stderr:
        pytest.skip(f"uv cannot reach the package index: {result.stderr.strip()[:300]}")


async def test_a_uv_script_gets_its_dependency_and_this_interpreter_does_not(
    uv_cache: str,
) -> None:
    assert importlib.util.find_spec("tabulate") is None
    result = await graders.run_uv_script(TABULATE, ["a", 2], env={"UV_CACHE_DIR": uv_cache})
    _skip_if_offline(result)
    assert result.exit_code == 0, result.stderr
    assert result.stdout.split() == ["a", "2"]
    # Installed into uv's cache and an ephemeral environment, never here.
    assert importlib.util.find_spec("tabulate") is None
    assert "tabulate" not in sys.modules
    assert _cached(uv_cache, "tabulate")
    # uv made the script's environment once; a second run reuses it.
    made = _environments(uv_cache)
    assert (await graders.run_uv_script(TABULATE, ["c"], env={"UV_CACHE_DIR": uv_cache})).ok
    assert _environments(uv_cache) == made
    # With the dependency cached, it runs offline.
    again = await graders.run_uv_script(
        TABULATE, ["b"], env={"UV_CACHE_DIR": uv_cache}, offline=True
    )
    assert again.exit_code == 0 and again.stdout.split() == ["b"], again.stderr


async def test_offline_with_an_empty_cache_fails_with_uvs_reason(tmp_path: Path) -> None:
    result = await graders.run_uv_script(
        TABULATE, env={"UV_CACHE_DIR": str(tmp_path)}, offline=True
    )
    assert result.exit_code != 0 and "tabulate" in result.stderr


async def test_a_uv_script_sees_an_allowlist_and_what_it_is_given(
    uv_cache: str, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    monkeypatch.setenv("OPENAI_API_KEY", SECRET)
    monkeypatch.setenv("GITHUB_TOKEN", SECRET)
    monkeypatch.setenv("PYTHONPATH", str(tmp_path))
    result = await graders.run_uv_script(
        ENV_DUMP, env={"UV_CACHE_DIR": uv_cache, "GIVEN": "yes"}, cwd=tmp_path
    )
    _skip_if_offline(result)
    assert result.exit_code == 0, result.stderr
    assert SECRET not in result.stdout and "PYTHONPATH" not in result.stdout
    assert {"GIVEN=yes", "UV_SYSTEM_CERTS=1"} <= set(result.stdout.splitlines())


async def test_a_uv_script_that_fails_or_runs_too_long(uv_cache: str) -> None:
    env = {"UV_CACHE_DIR": uv_cache}
    failing = "# /// script\n# dependencies = []\n# ///\nraise SystemExit('bad input')\n"
    result = await graders.run_uv_script(failing, env=env)
    _skip_if_offline(result)
    assert result.exit_code == 1 and "bad input" in result.stderr
    slow = "# /// script\n# dependencies = []\n# ///\nimport time\ntime.sleep(300)\n"
    result = await graders.run_uv_script(slow, env=env, timeout=3)
    assert result.timed_out and result.exit_code == -9


async def test_a_clear_error_when_uv_is_missing(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    monkeypatch.setitem(sys.modules, "uv", None)  # the package is not installed
    monkeypatch.setenv("PATH", str(tmp_path))  # nor is a uv on PATH
    with pytest.raises(FileNotFoundError, match="needs uv: install it"):
        await graders.run_uv_script(ENV_DUMP)


async def test_a_shared_scripts_folder_that_is_not_private_is_refused(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    folder = tmp_path / "scripts"
    folder.mkdir(mode=0o755)
    folder.chmod(0o755)
    monkeypatch.setattr("proctor.env._graders_exec.SCRIPTS", str(folder))
    with pytest.raises(PermissionError, match="not a private folder"):
        await graders.run_uv_script(ENV_DUMP)


# -- in a rollout: a reward scoring what the agent left in the substrate -------------


def _workshop(folder: Path) -> Environment:
    env = Environment("workshop")
    env.add_shell(cwd=folder)

    @env.template
    async def write(text: str) -> AsyncGenerator[str, str]:
        yield f"Write {text!r} to answer.txt."

    @env.reward(weight=1.0)
    async def written(shell: ShellServer, task: Any) -> float:
        return await graders.command(
            "cat answer.txt", shell=shell, expect_output=task.text, match="exact"
        )

    return env


@pytest.mark.parametrize(("command", "reward"), [("echo 42 > answer.txt", 1.0), ("true", 0.0)])
async def test_a_reward_runs_a_command_through_the_injected_shell(
    tmp_path: Path, command: str, reward: float
) -> None:
    async def agent(run: Run) -> None:
        await ShellClient(run.binding("shell").url).run(command)
        run.trace.content = "done"

    task = Task(env="workshop", id="write", args={"text": "42"})
    async with LocalRuntime(_workshop(tmp_path)) as runtime:
        run = await rollout(task, agent, runtime=runtime)
    assert run.status == "completed" and not run.evaluation_failed, run.error
    assert run.reward == reward
    assert run.grade is not None and run.grade.subscores[0]["name"] == "written"
