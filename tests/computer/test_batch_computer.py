"""A batch config's `computer` agent entry: `ComputerAgent` with its options, through
`proctor batch` and the interception proxy, on the `form` example's desktop task, with
the fake model playing the example's scripted policy."""

from __future__ import annotations

import asyncio
import importlib.util
import json
import sys
from pathlib import Path
from typing import Any

from proctor.batch import list_rollouts
from proctor.testing import FakeModelServer

REPO = Path(__file__).resolve().parents[2]
FORM = REPO / "examples" / "computer" / "form"


def _form_policy() -> Any:
    spec = importlib.util.spec_from_file_location("form_policy", FORM / "policy.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module.policy


def _config(root: Path, model: str) -> Path:
    """Two entries on one model: JPEG frames and a temperature; a budget of 7 actions
    (the form's batch is 7, so the budget ends the rollout before `done`)."""
    config = root / "form.toml"
    config.write_text(
        'name = "form"\nmax_concurrent = 1\nexpected_rollouts = 2\n'
        f'[taskset]\nsource = "{FORM / "tasks.py"}"\nlimit = 1\n'
        '[runtime]\nkind = "local"\ntrusted = true\n[timeouts]\nrollout = 120\n'
        f'[[agents]]\nkind = "computer"\nmodel = "{model}"\nmax_actions = 40\n'
        'frame = {format = "jpeg", quality = 60}\nparams = {temperature = 0}\n'
        f'[[agents]]\nkind = "computer"\nname = "budget"\nmodel = "{model}"\nmax_actions = 7\n'
    )
    return config


async def _batch(config: Path, out: Path) -> list[dict[str, Any]]:
    proc = await asyncio.create_subprocess_exec(
        *(sys.executable, "-m", "proctor.cli", "batch", str(config)),
        *("--execute", "--output-dir", str(out), "--quiet"),
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
        cwd=REPO,
    )
    stdout, stderr = await asyncio.wait_for(proc.communicate(), 240)
    assert proc.returncode == 0, (stdout + stderr).decode()
    return list_rollouts(out)


async def test_computer_entries_fill_the_form_through_the_proxy(tmp_path: Path) -> None:
    out = tmp_path / "out"
    async with FakeModelServer(_form_policy(), models=("gpt-4.1",)) as fake:
        rows = await _batch(_config(tmp_path, f"openai/gpt-4.1@{fake.url}"), out)
    by_agent = {row["agent"]: row for row in rows}
    assert set(by_agent) == {"computer-openai/gpt-4.1", "budget"}
    for row in rows:  # the budget's rollout is graded on the final state, as saved
        assert row["status"] == "completed" and row["reward"] == 1.0, row
    records = {
        row["agent"]: json.loads((out / "rollouts" / f"{row['id']}.json").read_text())
        for row in rows
    }
    assert records["budget"]["stop_reason"] == "action_budget"
    assert records["computer-openai/gpt-4.1"]["stop_reason"] is None
    # the first entry's options reached the model: its frames are JPEG, its temperature 0
    jpeg = [r for r in fake.requests if r.json.get("temperature") == 0]
    assert len(jpeg) == 2 and all(r.tool_names == ["computer_action"] for r in jpeg)
    assert {i.media_type for r in jpeg for i in r.images} == {"image/jpeg"}
    # the proxy kept both frames it saw (the opening screen, the saved form) as files
    sums = out / "rollouts" / by_agent["computer-openai/gpt-4.1"]["id"] / "artifacts"
    frames = [line for line in (sums / "SHA256SUMS").read_text().splitlines() if "frames/" in line]
    assert len(frames) == 2 and all(line.endswith(".jpg") for line in frames)
