"""`examples/computer/form` and `examples/computer/web` end to end from the command line,
as their READMEs document them: each row solved offline (reward 1) by a scripted model
through the fake model server, natively on the form, and by Playwright over CDP on the
page; the grades come from the app's saved state and the order the page sent."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

REPO = Path(__file__).resolve().parents[2]
_CHECKED = ("-v", "--no-record", "--strict", "--output")  # -v: tracebacks


def _run(tmp_path: Path, source: str, *flags: str) -> list[dict[str, Any]]:
    """`proctor run SOURCE FLAGS`: every rollout's JSON line, after a clean exit."""
    out = tmp_path / "runs.jsonl"
    result = subprocess.run(
        [sys.executable, "-m", "proctor.cli", "run", source, *flags, *_CHECKED, str(out)],
        capture_output=True,
        text=True,
        timeout=240,
        cwd=REPO,
    )
    assert result.returncode == 0, result.stdout + result.stderr
    return [json.loads(line) for line in out.read_text().splitlines()]


@pytest.mark.parametrize(
    "flags",
    [
        pytest.param(["--max-concurrent", "1"], id="computer_action"),
        pytest.param(
            ["--agent", "examples/computer/form/policy.py:Native", "--limit", "1"], id="native"
        ),
    ],
)
def test_the_form_is_filled_and_saved(tmp_path: Path, flags: list[str]) -> None:
    runs = _run(tmp_path, "examples/computer/form/tasks.py", *flags)
    assert runs and all(run["reward"] == 1.0 for run in runs), runs
    first = runs[0]["grade"]
    assert first["info"]["saved"] == {
        "saved": True,
        "name": "Ada Lovelace",
        "email": "ada@example.org",
        "subscribe": True,
    }
    assert [s["name"] for s in first["subscores"]] == ["name", "email", "subscribe"]


def test_the_page_is_ordered_by_a_scripted_model(tmp_path: Path) -> None:
    runs = _run(tmp_path, "examples/computer/web/tasks.py", "--max-concurrent", "1")
    assert len(runs) == 2 and all(run["reward"] == 1.0 for run in runs), runs
    orders = [run["grade"]["info"]["order"] for run in runs]
    assert {"name": "Grace Hopper", "size": "large"} in orders
    assert {"name": "Edsger Dijkstra", "size": "small"} in orders


def test_the_page_is_ordered_by_playwright_over_cdp(tmp_path: Path) -> None:
    agent = "examples/computer/web/policy.py:PlaywrightAgent"
    runs = _run(
        tmp_path,
        "examples/computer/web/tasks.py",
        "--agent",
        agent,
        "--runtime",
        "subprocess",
        "--limit",
        "1",
    )
    assert [run["reward"] for run in runs] == [1.0]
    assert runs[0]["trace"]["content"] == "Ordered: large for Grace Hopper"
