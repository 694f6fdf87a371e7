"""OpenEnv environments behind `reset`/`step` MCP tools, graded by their rewards.

Two echo examples: the one `openenv-core` ships (the template `openenv init` renders:
reward 0.1 per character echoed), rendered into a temporary folder and served in the
environment's process or by uvicorn in a child process; and the OpenEnv repository's
`envs/echo_env` (MCP tools inside, reward 0), vendored in `openenv_echo/`.
"""

from __future__ import annotations

import asyncio
import json
import re
import shutil
import sys
from collections.abc import AsyncIterator
from contextlib import AsyncExitStack
from pathlib import Path
from typing import Any

import pytest

from proctor import Run, Task
from proctor.agents import run_tools
from proctor.engine import rollout, run_taskset
from proctor.importers import detect, openenv_environment
from proctor.runtimes import LocalRuntime

pytest.importorskip("openenv.core", reason="needs `pip install 'proctor[openenv]'`")

NAME = "echo_env"
HERE = Path(__file__).resolve().parent


@pytest.fixture
def echo_folder(tmp_path: Path) -> Path:
    """openenv-core's echo template rendered as `openenv init echo_env` would."""
    import openenv.cli.templates as templates  # type: ignore[import-untyped,unused-ignore]

    source = Path(templates.__file__).parent / "openenv_env"
    folder = tmp_path / NAME
    shutil.copytree(source, folder, ignore=shutil.ignore_patterns("__pycache__"))
    (folder / "server" / "__ENV_NAME___environment.py").rename(
        folder / "server" / f"{NAME}_environment.py"
    )
    names = {"__ENV_NAME__": NAME, "__ENV_CLASS_NAME__": "EchoEnv", "__ENV_TITLE_NAME__": "Echo"}
    # The edit its comment invites: more than one WebSocket session at a time.
    names["max_concurrent_envs=1,"] = "max_concurrent_envs=4,"
    for path in folder.rglob("*"):
        if path.is_file():
            text = path.read_text()
            for old, new in names.items():
                text = text.replace(old, new)
            path.write_text(text)
    return folder


class StepAgent:
    """Sends each action through the `step` tool, as `ToolAgent` offers it (the
    episode's key as a bearer token); keeps the tool results."""

    def __init__(self, *actions: dict[str, Any], barrier: asyncio.Barrier | None = None) -> None:
        self.actions = actions
        self.barrier = barrier
        self.results: list[str] = []

    async def __call__(self, run: Run) -> None:
        async with AsyncExitStack() as stack:
            tools = {t.name: t for t in await run_tools(run, stack)}
            assert set(tools) == {"reset", "step"}
            if self.barrier is not None:  # every episode is open before any acts
                await self.barrier.wait()
            for action in self.actions or ({"message": run.prompt.split()[-1]},):
                content = (await tools["step"]({"action": action})).content
                assert isinstance(content, str)  # OpenEnv observations come back as text
                self.results.append(content)
        run.trace.content = ""


async def test_an_openenv_folder_is_detected_and_graded_by_the_sum_of_rewards(
    echo_folder: Path,
) -> None:
    source = detect(echo_folder)
    assert source is not None and source.kind == "openenv"
    (row,) = source.rows
    assert (row.env, row.id, row.slug) == (NAME, "episode", NAME)
    agent = StepAgent({"message": "hello"}, {"message": "hi"})
    run = await rollout(row, agent, runtime=LocalRuntime(source.environment))
    assert run.status == "completed", run.error
    assert run.reward == pytest.approx(0.7)  # 0.1 per character: 0.5 + 0.2
    assert run.grade is not None and run.grade.info["steps"] == 2
    assert '"echoed_message": "hello"' in agent.results[0]
    assert "message" in run.prompt and "Echo environment ready!" in run.prompt


@pytest.fixture
async def child_server(echo_folder: Path) -> AsyncIterator[str]:
    """The echo app served by uvicorn in a child process on a free loopback port."""
    argv = [sys.executable, "-m", "uvicorn", "server.app:app", "--port", "0"]
    argv += ["--host", "127.0.0.1", "--app-dir", str(echo_folder)]
    proc = await asyncio.create_subprocess_exec(*argv, stderr=asyncio.subprocess.PIPE)
    assert proc.stderr is not None
    try:
        while line := (await proc.stderr.readline()).decode():
            if found := re.search(r"running on (http://127\.0\.0\.1:\d+)", line):
                yield found.group(1)
                break
        else:
            pytest.fail("uvicorn exited before serving")
    finally:
        proc.terminate()
        await proc.wait()


async def test_a_running_openenv_server_graded_by_its_last_reward(child_server: str) -> None:
    env = openenv_environment(base_url=child_server, name="echo-remote", aggregate="last")
    row = Task(env="echo-remote", id="episode", args={"prompt": "Echo things."})
    agent = StepAgent({"message": "hello"}, {"message": "hi"})
    run = await rollout(row, agent, runtime=LocalRuntime(env))
    assert run.status == "completed", run.error
    assert run.prompt == "Echo things."
    assert run.reward == pytest.approx(0.2)
    assert run.grade is not None and run.grade.info["rewards"] == pytest.approx([0.5, 0.2])


async def test_concurrent_episodes_in_one_process_keep_their_own_rewards(
    echo_folder: Path,
) -> None:
    source = detect(echo_folder)
    assert source is not None
    words = ["a", "hello", "abc"]
    rows = [
        Task(env=NAME, id="episode", slug=word, args={"prompt": f"Say {word}"}) for word in words
    ]
    agent = StepAgent(barrier=asyncio.Barrier(len(rows)))
    runtime = LocalRuntime(source.environment)
    job = await run_taskset(rows, agent, runtime=runtime, max_concurrent=len(rows))
    rewards = {run.slug: run.reward for run in job.runs}
    assert rewards == pytest.approx({"a": 0.1, "hello": 0.5, "abc": 0.3})


async def test_a_model_acts_through_tool_agents_step_tool(echo_folder: Path) -> None:
    from proctor.agents import ToolAgent
    from proctor.testing import FakeModelServer, Reply

    source = detect(echo_folder)
    assert source is not None
    script = [Reply.tool("step", action={"message": "hello"}), Reply(text="Done.")]
    async with FakeModelServer(lambda request: script.pop(0)) as fake:
        agent = ToolAgent(f"fake/m@{fake.url}")
        run = await rollout(source.rows[0], agent, runtime=LocalRuntime(source.environment))
    assert run.status == "completed", run.error
    assert run.reward == pytest.approx(0.5)


def test_arguments_are_checked() -> None:
    with pytest.raises(ValueError, match="an app or a base_url"):
        openenv_environment()
    with pytest.raises(ValueError, match="aggregate"):
        openenv_environment(base_url="http://127.0.0.1:1", aggregate="mean")  # type: ignore[arg-type]


def test_a_manifest_linking_out_of_its_folder_is_refused(tmp_path: Path) -> None:
    outside = tmp_path / "manifest.yaml"  # another folder's: its name would be the row's
    outside.write_text("name: elsewhere\napp: server.app:app\n")
    folder = tmp_path / "env"
    folder.mkdir()
    (folder / "openenv.yaml").symlink_to(outside)
    with pytest.raises(ValueError, match=r"openenv\.yaml: links to .* outside"):
        detect(folder)


async def test_the_repository_echo_env_answers_mcp_actions(echo_folder: Path) -> None:
    source = detect(HERE / "openenv_echo")  # beside the other echo env: no collision
    other = detect(echo_folder)
    assert source is not None and other is not None
    call = {"type": "call_tool", "tool_name": "echo_message", "arguments": {"message": "hi"}}
    agent = StepAgent(call)
    run = await rollout(source.rows[0], agent, runtime=LocalRuntime(source.environment))
    assert run.status == "completed", run.error
    assert run.reward == 0.0
    assert json.loads(agent.results[0])["observation"]["result"]["data"] == "hi"
    assert "tool_name" in run.prompt  # the action schema: CallToolAction's
