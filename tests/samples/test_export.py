"""Samples from a batch output directory, and `proctor export` to JSONL and Parquet."""

from __future__ import annotations

import importlib
import json
import subprocess
import sys
import textwrap
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest
from notes_env import COMPACT_AT, NOTES, VLLM, make_policy

from proctor.batch import JsonlReader, aexecute, list_rollouts, read_rollout
from proctor.cli import main
from proctor.samples import samples_from_batch
from proctor.testing import FakeModelServer

PROCTOR = str(Path(sys.executable).with_name("proctor"))
MODEL = "gpt-4.1-mini"  # priced, so the plan passes
HERE = Path(__file__).parent

AGENTS = f"""
import sys

sys.path.insert(0, {str(HERE)!r})

from notes_env import note
from proctor.agents import ToolAgent
from proctor.models import ContextPolicy


class Compacting(ToolAgent):
    def __init__(self):
        super().__init__(
            "openai/{MODEL}",
            tools=[note],
            context=ContextPolicy(max_bytes={COMPACT_AT}),
            params={VLLM!r},
        )
"""


@pytest.fixture(autouse=True)
def no_provider_keys(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("OPENAI_API_KEY", raising=False)


@pytest.fixture
async def batch(tmp_path: Path) -> AsyncIterator[Path]:
    """A finished batch: one task, 4 repeats of a compacting tool agent behind the proxy."""
    (tmp_path / "agents.py").write_text(textwrap.dedent(AGENTS))
    row = {"env": "notes", "id": "count", "args": {"n": NOTES}, "slug": "count-6"}
    (tmp_path / "tasks.json").write_text(json.dumps([row]))
    async with FakeModelServer(make_policy(NOTES), models=(MODEL,)) as fake:
        config = {
            "name": "samples",
            "taskset": {"source": "tasks.json", "env_source": str(HERE / "notes_env.py")},
            "agents": [
                {
                    "kind": "python",
                    "agent": "agents.py:Compacting",
                    "model": f"openai/{MODEL}@{fake.url}",
                }
            ],
            "repeats": 4,
            "max_concurrent": 4,
            "expected_rollouts": 4,
        }
        (tmp_path / "batch.json").write_text(json.dumps(config))
        out = tmp_path / "out"
        result = await aexecute(tmp_path / "batch.json", out)
        assert result.exit_code == 0, result
        yield out


def export(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [PROCTOR, "export", *args], capture_output=True, text=True, timeout=120, check=False
    )


async def test_a_batch_gives_two_branches_per_rollout_with_tokens(batch: Path) -> None:
    samples = list(samples_from_batch(batch))
    rows = list_rollouts(batch)
    assert len(rows) == 4 and len(samples) == 8
    assert [s.turns for s in samples[:2]] == [[1, 2, 3, 4], [5, 6, 7]]
    assert {s.rollout_id for s in samples} == {r["id"] for r in rows}
    assert all(s.completion_token_ids is not None for s in samples)
    assert sorted(s.advantage or 0.0 for s in samples) == [-0.5] * 4 + [0.5] * 4
    assert all(s.advantage == s.reward - 0.5 for s in samples if s.reward is not None)
    assert len({s.group_id for s in samples}) == 1
    # Paged one row at a time, the group still spans the pages.
    assert list(samples_from_batch(batch, page=1)) == samples


async def test_model_turn_lines_keep_only_what_is_new(batch: Path) -> None:
    rid = list_rollouts(batch)[0]["id"]
    lines = list(JsonlReader(batch / "rollouts" / rid / "model_turns.jsonl"))
    contexts = [line["context"] for line in lines]
    assert [c["kept"] > 0 for c in contexts] == [False] + [True] * NOTES
    assert [bool(c.get("reset")) for c in contexts] == [False] * 4 + [True, False, False]
    assert "tools" in contexts[0] and all("tools" not in c for c in contexts[1:])
    assert all(len(c["new"]) <= 3 for c in contexts[1:])  # answer, result, checkpoint
    assert "request" not in lines[0]


async def test_export_jsonl_and_parquet_that_datasets_loads(batch: Path, tmp_path: Path) -> None:
    jsonl, parquet = tmp_path / "s.jsonl", tmp_path / "s.parquet"
    done = export(str(batch), "--format", "jsonl", "-o", str(jsonl))
    assert done.returncode == 0, done.stderr
    assert "exported 8 samples (8 with token ids) from 4 of 4 rollouts read" in done.stderr
    assert "gave no sample" not in done.stderr
    lines = [json.loads(line) for line in jsonl.read_text().splitlines()]
    expected = [s.to_dict() for s in samples_from_batch(batch)]
    assert lines == expected

    done = export(str(batch), "-o", str(parquet))  # the format from the suffix
    assert done.returncode == 0, done.stderr
    datasets = importlib.import_module("datasets")  # test-only, and untyped
    table = datasets.load_dataset("parquet", data_files=str(parquet), split="train")
    assert table.num_rows == 8
    for row, want in zip(table, expected, strict=True):
        check_row(row, want)


def check_row(row: dict[str, Any], want: dict[str, Any]) -> None:
    for key in ("prompt", "completion", "tools"):
        assert json.loads(row[key]) == want[key]
    for key in ("rollout_id", "branch", "turns", "task", "model", "group_id", "reward"):
        assert row[key] == want[key]
    assert row["advantage"] == pytest.approx(want["advantage"])
    assert row["completion_token_ids"] == want["completion_token_ids"]
    assert row["completion_mask"] == want["completion_mask"]
    assert row["completion_logprobs"] == pytest.approx(want["completion_logprobs"], abs=1e-6)


def test_export_refuses_what_is_not_a_record(tmp_path: Path) -> None:
    done = export(str(tmp_path), "-o", str(tmp_path / "s.jsonl"))
    assert done.returncode == 1
    assert done.stderr.startswith("error: ") and "no batch.json" in done.stderr
    assert not (tmp_path / "s.jsonl").exists()


async def test_a_branching_harness_in_a_batch(tmp_path: Path) -> None:
    row = {"env": "notes", "id": "talk", "args": {}, "slug": "talk"}
    (tmp_path / "tasks.json").write_text(json.dumps([row]))
    harness = [sys.executable, str(HERE / "branching_harness.py")]
    async with FakeModelServer(models=(MODEL,)) as fake:
        agent = {"kind": "command", "argv": harness, "model": f"openai/{MODEL}@{fake.url}"}
        config = {
            "name": "harness",
            "taskset": {"source": "tasks.json", "env_source": str(HERE / "notes_env.py")},
            "agents": [agent],
            "repeats": 2,
            "max_concurrent": 2,
            "expected_rollouts": 2,
        }
        (tmp_path / "batch.json").write_text(json.dumps(config))
        out = tmp_path / "out"
        result = await aexecute(tmp_path / "batch.json", out)
        assert result.exit_code == 0, result
    samples = list(samples_from_batch(out))
    assert [s.turns for s in samples] == [[1, 2, 4], [3], [5, 6]] * 2
    assert all(s.advantage == 0.0 and s.completion_mask for s in samples)
    trace = read_rollout(out, samples[0].rollout_id)["trace"]
    turns = [s for s in trace if s["kind"] == "model_turn"]
    assert len(turns) == 6 and not any("request" in s["data"] for s in turns)


def test_parquet_without_pyarrow_names_the_extra(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    (tmp_path / "batch.json").write_text("{}")
    monkeypatch.setitem(sys.modules, "pyarrow", None)  # import pyarrow now fails
    assert main(["export", str(tmp_path), "-o", str(tmp_path / "s.parquet")]) == 1
    assert capsys.readouterr().err == (
        "error: Parquet export needs pyarrow: pip install 'proctor[parquet]'\n"
    )
    assert not (tmp_path / "s.parquet").exists()
