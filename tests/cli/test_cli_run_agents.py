"""`proctor run --agent`: plain functions of the prompt are wrapped, not called with a Run."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from cli_helpers import LETTERS, assert_user_error, proctor, write

TASKS = LETTERS / "tasks.py"


@pytest.fixture(autouse=True)
def runs_dir(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """Records go under the test's folder, never into the repository."""
    folder = tmp_path / "proctor-runs"
    monkeypatch.setenv("PROCTOR_RUNS_DIR", str(folder))
    return folder


def test_a_sync_function_of_the_prompt_is_wrapped() -> None:
    result = proctor("run", TASKS, "--agent", f"{LETTERS / 'solver.py'}:solve", "--json")
    assert result.returncode == 0, result.stderr
    summary = json.loads(result.stdout)
    assert (summary["runs"], summary["errors"], summary["mean_reward"]) == (12, 0, 1.0)


def test_an_async_function_of_the_prompt_is_wrapped(tmp_path: Path) -> None:
    agents = write(
        tmp_path / "fns.py",
        """
        async def first_word(prompt):
            return prompt.split()[0]

        async def typed(text: str) -> str:
            return text.split()[0]

        async def agent_of_the_run(run):
            run.trace.content = str(run.prompt).split()[0]
        """,
    )
    for name in ("first_word", "typed", "agent_of_the_run"):
        result = proctor("run", TASKS, "--agent", f"{agents}:{name}", "--json", "--strict")
        assert result.returncode == 0, (name, result.stdout, result.stderr)
        summary = json.loads(result.stdout)
        assert (summary["errors"], summary["mean_reward"]) == (0, 0.0), name  # wrong answers


def test_a_sync_function_of_the_run_is_refused(tmp_path: Path) -> None:
    agents = write(
        tmp_path / "sync.py",
        """
        def sync_agent(run):
            run.trace.content = "never awaited"
        """,
    )
    assert_user_error(proctor("run", TASKS, "--agent", f"{agents}:sync_agent"), "not async")
