"""verifiers tasksets and Inspect AI task files from the command line: `proctor run`
takes them like any task file, and serves them from their own interpreters."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

HERE = Path(__file__).parent
REPO = HERE.parents[1]

AGENT = """
import re

CAPITALS = {"France": "Paris", "Japan": "Tokyo", "Peru": "Lima"}


def add(prompt):
    numbers = [int(n) for n in re.findall(r"\\d+", str(prompt))]
    return str(sum(numbers[:2]))


def capital(prompt):
    country = str(prompt).rstrip("?").rsplit(" ", 1)[-1]
    return f"The capital is {CAPITALS[country]}."
"""


def _run(tmp_path: Path, source: Path, agent: str) -> dict[str, object]:
    (tmp_path / "agent.py").write_text(AGENT)
    proc = subprocess.run(
        [sys.executable, "-m", "proctor.cli", "run", str(source), "--agent",
         f"{tmp_path / 'agent.py'}:{agent}", "--json", "--no-record"],
        capture_output=True, text=True, timeout=300, cwd=REPO, check=False,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    summary: dict[str, object] = json.loads(proc.stdout)
    return summary


@pytest.mark.skipif(
    not (REPO / ".venv-verifiers" / "bin" / "python").is_file(),
    reason="needs .venv-verifiers (make .venv-verifiers/.installed)",
)
def test_a_verifiers_package_runs_from_the_cli(tmp_path: Path) -> None:
    summary = _run(tmp_path, HERE / "vf_arith", "add")
    assert summary["runs"] == 3 and summary["mean_reward"] == 1.0


@pytest.mark.skipif(
    not (REPO / ".venv-inspect" / "bin" / "python").is_file(),
    reason="needs .venv-inspect (make .venv-inspect/.installed)",
)
def test_an_inspect_task_file_runs_from_the_cli(tmp_path: Path) -> None:
    summary = _run(tmp_path, HERE / "inspect_tasks" / "capitals.py", "capital")
    assert summary["runs"] == 6 and summary["mean_reward"] == 1.0  # two @task, 3 samples
