"""The conformance environment itself, and the `proctor.testing` namespace."""

from __future__ import annotations

import asyncio
import json
import os
from pathlib import Path

import proctor.testing
from proctor import Task
from proctor.agents import agent_from_fn
from proctor.channel._memory import memory_pair as channel_memory_pair
from proctor.engine import Timeouts, rollout
from proctor.runtimes import LocalRuntime
from proctor.testing import conformance_env

env = conformance_env.env


def files(folder: Path, pattern: str) -> list[Path]:
    return sorted(folder.glob(pattern))


def test_exports() -> None:
    for name in proctor.testing.__all__:
        assert hasattr(proctor.testing, name), name
    assert proctor.testing.memory_pair is channel_memory_pair
    assert env.name == "conformance" and set(env.tasks) == {"echo", "slow"}
    assert Path(conformance_env.SOURCE).name == "conformance_env.py"


async def test_echo_grades_an_exact_match() -> None:
    runtime = LocalRuntime(env)
    task = env.tasks["echo"](text="Exactly this.")
    right = await rollout(task, agent_from_fn(lambda p: p), runtime=runtime)
    wrong = await rollout(task, agent_from_fn(lambda p: p.lower()), runtime=runtime)
    assert (right.prompt, right.reward, wrong.reward) == ("Exactly this.", 1.0, 0.0)


async def test_markers_record_start_close_and_shutdown(tmp_path: Path) -> None:
    task = Task(env="conformance", id="echo", args={"text": "x", "marker": str(tmp_path)})
    run = await rollout(task, agent_from_fn(lambda p: p), runtime=LocalRuntime(env))
    assert run.reward == 1.0
    (start,) = files(tmp_path, "task-*.start")
    info = json.loads(start.read_text())
    assert info["pid"] == os.getpid() and info["instance"]
    assert info == {**conformance_env.process_identity(), "instance": info["instance"]}
    assert start.with_suffix(".closed").exists()
    assert (tmp_path / f"env-{info['instance']}.shutdown").exists()
    assert files(tmp_path, ".*.tmp") == []


async def test_slow_sleeps_before_the_prompt_and_closes_when_interrupted(tmp_path: Path) -> None:
    fast = Task(env="conformance", id="slow", args={"seconds": 0.01})
    run = await rollout(fast, agent_from_fn(lambda p: p), runtime=LocalRuntime(env))
    assert (run.prompt, run.reward) == ("slept 0.01s", 1.0)
    stuck = Task(env="conformance", id="slow", args={"seconds": 60, "marker": str(tmp_path)})
    run = await rollout(
        stuck, agent_from_fn(lambda p: p), runtime=LocalRuntime(env), timeout=Timeouts(start=0.1)
    )
    assert run.error is not None and run.error.phase == "starting"
    (start,) = files(tmp_path, "task-*.start")
    assert start.with_suffix(".closed").exists()


async def test_an_unreachable_marker_folder_is_ignored(tmp_path: Path) -> None:
    task = Task(
        env="conformance", id="echo", args={"text": "x", "marker": str(tmp_path / "missing")}
    )
    run = await rollout(task, agent_from_fn(lambda p: p), runtime=LocalRuntime(env))
    assert run.reward == 1.0


def test_process_identity_and_starttime() -> None:
    me = conformance_env.process_identity()
    assert me["pid"] == os.getpid() and me["pidns"] is not None
    assert conformance_env.starttime(os.getpid()) == me["starttime"] is not None
    assert conformance_env.starttime(2**22 + 12345) is None


async def test_memory_pair_connects_two_protocols() -> None:
    got: list[bytes] = []

    class Sink(asyncio.Protocol):
        def data_received(self, data: bytes) -> None:
            got.append(data)

    a, b = proctor.testing.memory_pair(asyncio.Protocol(), Sink())
    a.write(b"ping")
    assert got == [b"ping"]
    a.close()
    await asyncio.sleep(0)
    assert b.is_closing()
