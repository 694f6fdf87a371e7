"""A shutdown hook that raises is recorded on the run, in every runtime that runs hooks.

The rollout was graded before the substrate stopped, so the grade stays on the run; the
failure is the run's error in the teardown phase (issue 8, finding 10: the subprocess
and sandbox runtimes used to drop it, and the run read as completed).
"""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from proctor import LocalRuntime, SubprocessRuntime, Task
from proctor.agents import Run, agent_from_fn
from proctor.engine import rollout
from proctor.runtimes._base import RuntimeLike
from proctor.runtimes._sandbox import SandboxRuntime

SOURCE = Path(__file__).with_name("teardown_env.py")
TASK = Task(env="teardown-probe", id="answer")
needs_bwrap = pytest.mark.skipif(shutil.which("bwrap") is None, reason="bubblewrap missing")


async def _run(runtime: RuntimeLike) -> Run:
    return await rollout(TASK, agent_from_fn(lambda prompt: "anything"), runtime=runtime)


def _assert_recorded(run: Run) -> None:
    assert run.grade is not None and run.grade.reward == 1.0  # graded before teardown
    assert run.error is not None, "the failed shutdown hook was not recorded"
    assert run.error.phase == "teardown"
    assert "RuntimeError: shutdown boom" in run.error.message or (
        run.error.message == "shutdown boom"
    )


async def test_local_runtime_records_a_failed_shutdown_hook() -> None:
    _assert_recorded(await _run(LocalRuntime(SOURCE)))


@pytest.mark.parametrize("warm", [0, 1])
async def test_subprocess_runtime_records_a_failed_shutdown_hook(warm: int) -> None:
    runtime = SubprocessRuntime(SOURCE, warm=warm)
    async with runtime:
        run = await _run(runtime)
    _assert_recorded(run)
    assert run.error is not None and run.error.type == "TeardownError"


@needs_bwrap
@pytest.mark.parametrize("warm", [False, True])
@pytest.mark.parametrize("network", ["none", "host"])
async def test_sandbox_runtime_records_a_failed_shutdown_hook(warm: bool, network: str) -> None:
    runtime = SandboxRuntime(SOURCE, warm=warm, network=network)  # type: ignore[arg-type]
    async with runtime:
        run = await _run(runtime)
    _assert_recorded(run)
    assert run.error is not None and run.error.type == "TeardownError"


async def test_a_clean_shutdown_records_nothing(tmp_path: Path) -> None:
    source = tmp_path / "clean_env.py"
    source.write_text(SOURCE.read_text().replace('raise RuntimeError("shutdown boom")', "pass"))
    runtime = SubprocessRuntime(source, warm=1)
    async with runtime:
        run = await _run(runtime)
    assert run.status == "completed" and run.error is None
