"""`examples/math` end to end from the command line, as its README documents it.

The reward runs math-verify through uv inside the substrate; uv fetches it from the
package index into a uv cache of this module's own (the tests skip, with uv's reason,
only when the index cannot be reached). The second half runs offline from that cache.
"""

from __future__ import annotations

import importlib.util
import json
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from proctor import Run
from proctor.runtimes import LocalRuntime

REPO = Path(__file__).resolve().parents[2]
EXAMPLE = REPO / "examples" / "math"
HEXAGON = "What is the sum of the interior angles of a hexagon"


@pytest.fixture(scope="module")
def uv_env(tmp_path_factory: pytest.TempPathFactory) -> dict[str, str]:
    """This process's environment with a uv cache of the module's own."""
    cache = tmp_path_factory.mktemp("uv-cache")
    return {**os.environ, "UV_CACHE_DIR": str(cache)}


def _proctor(env: dict[str, str], *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "proctor.cli", *args],
        capture_output=True,
        text=True,
        timeout=300,
        cwd=REPO,
        env=env,
    )


def _skip_if_the_index_is_unreachable(runs: list[dict[str, Any]]) -> None:
    for run in runs:
        error = str(run["grade"]["info"].get("errors", {}).get("correct", ""))
        if "Failed to fetch" in error:
            pytest.skip(f"uv cannot reach the package index: {error[:300]}")


@pytest.fixture(scope="module")
def runs(uv_env: dict[str, str], tmp_path_factory: pytest.TempPathFactory) -> list[dict[str, Any]]:
    """The README's command, `--group 2`, each run as its JSON line."""
    out = tmp_path_factory.mktemp("math") / "runs.jsonl"
    agent = "examples/math/solver.py:solve"
    flags = ["--agent", agent, "--group", "2", "--no-record", "--output", str(out), "--json"]
    result = _proctor(uv_env, "run", "examples/math/tasks.py", *flags)
    assert result.returncode == 0, result.stderr
    found = [json.loads(line) for line in out.read_text().splitlines()]
    found = [run for run in found if "trace" in run]
    _skip_if_the_index_is_unreachable(found)
    return found


def test_math_verify_grades_every_rollout(runs: list[dict[str, Any]]) -> None:
    assert len(runs) == 12 and {run["status"] for run in runs} == {"completed"}
    for run in runs:
        grade = run["grade"]
        assert not grade["is_error"], grade["info"]
        assert [s["name"] for s in grade["subscores"]] == ["correct"]
        answer = run["trace"]["content"]
        if run["prompt"].startswith(HEXAGON):  # the solver flips a coin there
            assert run["reward"] == (1.0 if "720" in answer else 0.0)
        else:  # an equivalent form of the expected answer
            assert run["reward"] == 1.0


def test_the_metric_is_recorded_and_weighs_nothing(runs: list[dict[str, Any]]) -> None:
    for run in runs:
        metrics = run["grade"]["info"]["metrics"]
        assert metrics == {"answer_length": float(len(run["trace"]["content"]))}


@pytest.fixture
def math_example() -> Iterator[Any]:
    """`examples/math/tasks.py`, imported as the loader would (its folder on sys.path)."""
    sys.path.insert(0, str(EXAMPLE))
    try:
        yield importlib.import_module("tasks")
    finally:
        sys.path.remove(str(EXAMPLE))
        for name in ("env", "solver", "tasks"):
            sys.modules.pop(name, None)


async def test_the_group_reward_is_pass_at_2_over_each_rows_group(
    runs: list[dict[str, Any]], uv_env: dict[str, str], math_example: Any, monkeypatch: Any
) -> None:
    assert runs  # the cache has math-verify now
    monkeypatch.setenv("UV_CACHE_DIR", uv_env["UV_CACHE_DIR"])
    async with LocalRuntime(math_example.math) as runtime:
        job = await math_example.tasks.run(math_example.agent, runtime=runtime, group=2)
    assert len(job.runs) == 12 and all(run.grade is not None for run in job.runs)
    groups: dict[str, list[Run]] = {}
    for run in job.runs:
        groups.setdefault(run.group_id, []).append(run)
    assert sorted(len(group) for group in groups.values()) == [2] * 6
    for group in groups.values():
        passed = any(run.reward == 1.0 for run in group)
        mean = sum(run.reward or 0.0 for run in group) / 2
        for run in group:
            assert run.group_rewards == {"pass_at_2": 1.0 if passed else 0.0}
            assert run.advantage == pytest.approx((run.reward or 0.0) - mean)
            assert run.grade is not None and run.reward == run.grade.reward  # weight 0


def test_math_verify_never_entered_proctors_interpreter(runs: list[dict[str, Any]]) -> None:
    assert runs
    assert importlib.util.find_spec("math_verify") is None


def test_offline_from_the_cache_the_reference_solutions_score_one(
    runs: list[dict[str, Any]], uv_env: dict[str, str]
) -> None:
    assert runs  # the cache has math-verify now
    offline = {**uv_env, "UV_OFFLINE": "1"}
    result = _proctor(offline, "validate", "examples/math/tasks.py", "--oracle")
    assert result.returncode == 0, result.stdout + result.stderr
    assert "6 ok, 0 broken" in result.stdout
