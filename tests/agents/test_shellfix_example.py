"""`examples/shellfix`: offline end to end from the command line, and a grader that checks."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from proctor import LocalRuntime, Run, Task, rollout
from proctor.env import ShellClient

REPO = Path(__file__).resolve().parents[2]
EXAMPLE = REPO / "examples" / "shellfix"


@pytest.mark.parametrize("runtime", ["local", "subprocess", "warm"])
def test_the_offline_agent_fixes_every_bug(runtime: str, tmp_path: Path) -> None:
    out = tmp_path / "runs.jsonl"
    env = {k: v for k, v in os.environ.items() if k != "SHELLFIX_MODEL"}
    flags = ["--runtime", runtime, "--json", "--strict", "--output", str(out)]
    result = subprocess.run(
        [sys.executable, "-m", "proctor.cli", "run", str(EXAMPLE / "tasks.py"), *flags],
        capture_output=True,
        text=True,
        timeout=120,
        cwd=REPO,
        env=env,
    )
    assert result.returncode == 0, result.stderr
    summary = json.loads(result.stdout)
    assert (summary["runs"], summary["errors"], summary["mean_reward"]) == (3, 0, 1.0)
    runs = [json.loads(line) for line in out.read_text().splitlines()]
    runs = [r for r in runs if "trace" in r]
    assert len(runs) == 3
    for run in runs:
        kinds = [s["kind"] for s in run["trace"]["steps"]]
        assert kinds.count("tool_call") == 3 and kinds[-2] == "assistant"
        assert run["grade"]["subscores"] == [
            {"name": "visible", "value": 1.0, "weight": 1.0},
            {"name": "hidden", "value": 1.0, "weight": 1.0},
        ]


async def test_the_grade_runs_the_script_on_hidden_input_too() -> None:
    async def hardcode(run: Run) -> None:
        cwd = run.binding("shell").params["cwd"]
        shell = ShellClient(run.binding("shell").url, cwd=cwd)
        await shell.run("printf 'print(\"5.00\")\\n' > stats.py")
        run.trace.content = "hardcoded the visible answer"

    async def idle(run: Run) -> None:
        run.trace.content = "did nothing"

    task = Task(env="shellfix", id="fix", args={"bug": "mean"})
    async with LocalRuntime(EXAMPLE / "env.py") as runtime:
        cheat = await rollout(task, hardcode, runtime=runtime)
        lazy = await rollout(task, idle, runtime=runtime)
    assert cheat.reward == 0.5, cheat.error  # right on data.txt, wrong on the hidden file
    assert lazy.reward == 0.0, lazy.error
    assert cheat.grade is not None and cheat.grade.info["hidden"]["stdout"] == "5.00\n"
