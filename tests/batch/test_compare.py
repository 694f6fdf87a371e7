"""Agents compared through the CLI: `proctor batch report` by agent (and agent x task,
flakiness, the paired comparison) and `proctor batch compare`, on real batches of two
Python agents: one solves, one answers "0"."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from exec_env import config, workspace, write_config

from proctor.batch import execute
from proctor.cli import main

AGENTS = """

async def zero(run):
    run.answer = "0"


async def half(run):
    # Right on odd repeats only: 2 passes in 4 repeats.
    n = int(run.trace_id.split(".")[0].rsplit("r", 1)[1])
    if n % 2:
        await solver(run)
    else:
        await zero(run)
"""

TASKS = 10


def _rows(n: int) -> list[dict[str, Any]]:
    return [
        {"env": "mini", "id": "add", "args": {"a": i, "b": i + 1}, "slug": f"add-{i}"}
        for i in range(1, n + 1)
    ]


def _batch(root: Path, out: str, agents: list[str], tasks: int, repeats: int) -> Path:
    workspace(root, _rows(tasks))
    with (root / "agents.py").open("a") as f:
        f.write(AGENTS)
    data = config(
        agents=[{"kind": "python", "agent": f"agents.py:{a}", "name": a} for a in agents],
        repeats=repeats,
        expected_rollouts=tasks * len(agents) * repeats,
        max_concurrent=4,
    )
    result = execute(write_config(root, data, f"{out}.json"), root / out)
    assert result.launched and not result.error
    return root / out


@pytest.fixture(scope="module")
def two(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """10 tasks x {solver, zero}, one repeat."""
    return _batch(tmp_path_factory.mktemp("two"), "out", ["solver", "zero"], TASKS, 1)


def _cli(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    code = main(["batch", *argv])
    captured = capsys.readouterr()
    return code, captured.out, captured.err


def test_the_report_has_a_row_per_agent_and_compares_the_two(
    two: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    code, out, _ = _cli(capsys, "report", str(two), "--json")
    assert code == 0
    doc = json.loads(out)
    agents = {g["agent"]: g for g in doc["by_agent"]}
    assert set(agents) == {"solver", "zero"}
    assert agents["solver"]["mean_reward"] == 1.0 and agents["solver"]["rollouts"] == TASKS
    assert agents["zero"]["mean_reward"] == 0.0 and agents["zero"]["pass_rate"] == 0.0
    assert agents["solver"]["se"] == 0.0
    assert len(doc["by_agent_task"]) == TASKS
    assert doc["by_agent_task"][0]["agents"]["solver"]["mean"] == 1.0
    assert doc["flakiness"]["solver"]["flaky"] == 0
    comparison = doc["comparison"]
    assert (comparison["a"]["agent"], comparison["b"]["agent"]) == ("solver", "zero")
    assert comparison["difference"]["mean"] == -1.0
    assert comparison["pass_fail"]["test"] == "mcnemar_exact"
    assert comparison["pass_fail"]["p_value"] == pytest.approx(2 / 2**TASKS)
    assert comparison["significant"]
    code, text, _ = _cli(capsys, "report", str(two))
    assert code == 0
    lines = text.splitlines()
    by_agent = lines.index("By agent")
    assert lines[by_agent + 2].split()[:4] == ["solver", str(TASKS), str(TASKS), "1.000"]
    assert lines[by_agent + 3].split()[:4] == ["zero", str(TASKS), str(TASKS), "0.000"]
    assert "zero - solver = -1.000 [95% CI -1.000, -1.000]" in text
    assert text.count("significant at 0.05") == 1 and "not significant" not in text
    assert "Flakiness" not in text  # one repeat


def test_compare_inside_one_batch_and_between_two(
    two: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    code, text, _ = _cli(capsys, "compare", str(two), "--agents", "zero", "solver")
    assert code == 0
    assert f"tasks: {TASKS} matched, 0 only in A, 0 only in B" in text
    assert "solver - zero = +1.000" in text and text.rstrip().count("significant at 0.05") == 1
    code, out, _ = _cli(
        capsys, "compare", str(two), str(two), "--agent-a", "solver", "--agent-b", "solver"
    )
    doc = json.loads(_cli(capsys, *_json(str(two), str(two), "solver", "solver"))[1])
    assert code == 0 and "not significant: the CI includes 0" in out
    assert doc["difference"]["mean"] == 0.0 and not doc["significant"]
    assert doc["pass_fail"]["ties"] == TASKS


def _json(a: str, b: str, agent_a: str, agent_b: str) -> list[str]:
    return ["compare", a, b, "--agent-a", agent_a, "--agent-b", agent_b, "--json"]


def test_compare_says_which_agent_to_choose(two: Path, capsys: pytest.CaptureFixture[str]) -> None:
    code, _, err = _cli(capsys, "compare", str(two), str(two))
    assert code == 1
    assert "has 2 agents (solver, zero): choose one with --agent-a" in err
    code, _, err = _cli(capsys, "compare", str(two), "--agents", "solver", "nobody")
    assert code == 1 and "no agent 'nobody'; its agents: solver, zero" in err


def test_flakiness_and_pass_at_k_over_repeats(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    out = _batch(tmp_path, "flaky", ["half", "solver"], 3, 4)
    code, text, _ = _cli(capsys, "report", str(out), "--json")
    doc = json.loads(text)
    half = doc["flakiness"]["half"]
    assert (half["tasks"], half["flaky"]) == (3, 3)
    assert [r["pass_at_k"] for r in half["pass_at_k"]] == pytest.approx([0.5, 5 / 6, 1.0, 1.0])
    assert all(r["variance"] == 0.25 and r["pass_rate"] == 0.5 for r in half["per_task"])
    assert doc["flakiness"]["solver"]["flaky"] == 0
    assert doc["comparison"]["pass_fail"]["test"] == "sign_test"
    # 3 tasks cannot make a sign test significant (p = 0.25), however clear the CI
    verdict = doc["comparison"]["verdict"]
    assert "not significant at 0.05: the CI excludes 0 but p >= 0.05" in verdict
    code, text, _ = _cli(capsys, "report", str(out))
    assert code == 0
    flaky = text.split("Flakiness across repeats")[1].splitlines()
    assert flaky[2].split() == ["half", "3", "3", "0.500", "0.833", "1.000", "1.000"]
    assert flaky[3].split() == ["solver", "3", "0", "1.000", "1.000", "1.000", "1.000"]
