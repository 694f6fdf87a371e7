"""HUD's authoring names under `--compat hud`: scoped to the source's folder, mapped for
real (graders, results, capabilities), and a clear error for any name not mapped."""

from __future__ import annotations

import importlib.util
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from proctor import LocalRuntime, Task, agent_from_fn, rollout
from proctor._loader import find_environment

GRADED = """
    from hud import Environment
    from hud.capabilities import Capability
    from hud.graders import BashGrader, EvaluationResult, SubScore, combine
    import helper

    env = Environment(name="graded", version="1.2.3")
    env.add_capability(Capability.mcp(name="tools", url="http://127.0.0.1:9/mcp"))
    env.add_capability(Capability.mcp(name="tools", url="http://127.0.0.1:10/mcp"))

    @env.template(id="check", description="graded three ways")
    async def check(word: str = "yes"):
        answer = yield f"Say {word}."
        yield await combine(
            BashGrader.grade(weight=0.5, command=f"test {answer!r} = {word!r}"),
            SubScore(name="seen", value=helper.seen(answer), weight=0.25),
            BashGrader.grade(weight=0.25, command="echo out; exit 4"),
        )

    @env.template()
    async def plain():
        yield "Anything."
        yield EvaluationResult(reward=0.5, content="half", isError=False, note="kept")
"""

HELPER = """
    import hud.graders

    def seen(answer):
        return 1.0 if isinstance(hud.graders.SubScore, type) and answer else 0.0
"""


@pytest.fixture
def source(tmp_path: Path) -> Path:
    (tmp_path / "helper.py").write_text(textwrap.dedent(HELPER))
    path = tmp_path / "graded_env.py"
    path.write_text(textwrap.dedent(GRADED))
    return path


async def test_graders_and_results_are_hud_s(source: Path) -> None:
    env = find_environment(source, compat="hud")
    assert (env.name, env.version) == ("graded", "1.2.3")
    [tools] = env.capabilities  # a same-named capability replaces (HUD's rule)
    assert (tools.protocol, tools.url) == ("mcp/2025-11-25", "http://127.0.0.1:10/mcp")
    async with LocalRuntime(env) as runtime:
        run = await rollout(
            Task(env="graded", id="check"), agent_from_fn(lambda p: "yes"), runtime=runtime
        )
        plain = await rollout(
            Task(env="graded", id="plain"), agent_from_fn(lambda p: ""), runtime=runtime
        )
    assert run.error is None, run.error
    assert run.reward == 0.75
    assert run.grade is not None
    bash, seen, failed = run.grade.subscores
    assert (bash["name"], bash["value"], bash["info"]["exit_code"]) == ("BashGrader-1", 1.0, 0)
    assert (seen["name"], seen["value"], seen["weight"]) == ("seen", 1.0, 0.25)
    assert (failed["name"], failed["value"], failed["info"]["exit_code"]) == (
        "BashGrader-2",
        0.0,
        4,
    )
    assert failed["info"]["stdout"] == "out\n"
    assert plain.grade is not None
    assert (plain.reward, plain.grade.content, plain.grade.info) == (0.5, "half", {"note": "kept"})


def test_hud_is_never_importable_outside_the_source(source: Path) -> None:
    find_environment(source, compat="hud")
    assert "hud" not in sys.modules
    assert importlib.util.find_spec("hud") is None  # nothing installed, nothing shadowed


def serve(source: Path, *flags: str) -> subprocess.CompletedProcess[str]:
    """`proctor serve SOURCE` in a child that fails before serving (no port to kill)."""
    argv = [sys.executable, "-m", "proctor.cli", "serve", *flags, str(source)]
    return subprocess.run(argv, capture_output=True, text=True, timeout=60, check=False)


@pytest.mark.parametrize(
    ("line", "named"),
    [
        ("from hud import Taskset", "hud.Taskset is not supported"),
        ("from hud.graders import LLMJudgeGrader", "hud.graders.LLMJudgeGrader is not supported"),
        ("import hud.agents", "hud.agents is not supported"),
        ("env = __import__('hud').Environment('x'); env.gym('CartPole-v1')", "Environment.gym"),
        ("import hud; hud.environment.Workspace('.').discard_sandbox", "Workspace.discard_sandbox"),
    ],
)
def test_an_unmapped_name_is_named(tmp_path: Path, line: str, named: str) -> None:
    source = tmp_path / "env.py"
    source.write_text(f"{line}\n")
    done = serve(source, "--compat", "hud")
    assert done.returncode == 1
    assert done.stdout == ""
    assert named in done.stderr
    assert f"{source}:1" in done.stderr


def test_without_compat_hud_is_not_there(source: Path) -> None:
    done = serve(source)
    assert done.returncode == 1
    assert "No module named 'hud'" in done.stderr
