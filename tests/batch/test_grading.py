"""What a batch records of grading beyond one number: a reward that raised (an
evaluation that failed, never a 0), a verifier task's grade beside the actor's, and an
LLM judge whose key stays with the runner and whose cost counts on the rollout."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest
from exec_env import config, workspace, write_config

from proctor.batch import aexecute, plan, read_rollout
from proctor.testing import FakeModelServer, FakeRequest, Reply

REWARDS = """

from proctor.env import graders


@mini.template
async def scored(text: str):
    answer = yield f"Say {text}"


@scored.reward(weight=1.0)
def said(answer, task):
    return graders.exact(answer, task.text)


@scored.reward(weight=1.0)
def fussy(answer):
    raise ValueError("fussy grader boom")


@mini.template
async def judged(text: str):
    answer = yield f"Say {text}"


judged.reward(graders.judge("judge-model", "Full marks for saying the word."))


@mini.template
async def act(text: str):
    answer = yield f"Say {text}"
    yield 1.0


@mini.template
async def check(text: str):
    verdict = yield "verify the actor"
    yield 1.0 if verdict["score"] == 1.0 and text == "hi" else 0.0
"""


def _batch(root: Path, rows: list[dict[str, Any]], **extra: Any) -> Path:
    workspace(root, rows, env_extra=REWARDS)
    return write_config(root, config(expected_rollouts=len(rows), **extra))


def _record(out: Path, rollout_id: str) -> dict[str, Any]:
    found = read_rollout(out, rollout_id)["record"]
    assert found is not None, rollout_id
    return found


async def test_a_reward_that_raises_is_a_failed_evaluation_not_a_zero(tmp_path: Path) -> None:
    rows = [{"env": "mini", "id": "scored", "args": {"text": "hi"}, "slug": "scored"}]
    out = tmp_path / "out"
    result = await aexecute(_batch(tmp_path, rows), out)
    assert result.counts == {"completed": 1}
    assert result.evaluation_failed == 1 and result.exit_code == 1
    rec = _record(out, "scored--solver--r1")
    assert rec["status"] == "completed"
    assert rec["result"]["evaluation"] == "failed"
    assert rec["error"]["type"] == "EvaluationFailed"
    assert "fussy grader boom" in rec["error"]["message"]
    subscores = {s["name"]: s for s in rec["result"]["grade"]["subscores"]}
    assert subscores["said"]["value"] == 1.0
    assert "fussy grader boom" in subscores["fussy"]["info"]["error"]


async def test_a_verifier_grade_is_of_record_and_the_actor_grade_is_kept(tmp_path: Path) -> None:
    verifier = {"env": "mini", "id": "check", "args": {"text": "hi"}}
    row = {"env": "mini", "id": "act", "args": {"text": "hi"}, "slug": "act"}
    rows = [{**row, "verifier": verifier}]
    out = tmp_path / "out"
    result = await aexecute(_batch(tmp_path, rows), out)
    assert result.counts == {"completed": 1}, result
    rec = _record(out, "act--solver--r1")
    assert rec["reward"] == 1.0 and rec["actor_grade"]["reward"] == 1.0
    steps = rec["verifier_trace"]["steps"]
    assert [s["data"]["phase"] for s in steps] == ["setup", "evaluate"]


@pytest.fixture
async def judge_model() -> AsyncIterator[FakeModelServer]:
    def reply(request: FakeRequest) -> Reply:
        assert "Full marks" in str(request.json["messages"])
        return Reply(text="score: 0.8")

    async with FakeModelServer(reply, models=("gpt-4.1-mini",)) as server:
        yield server


async def test_a_judge_grades_through_the_runner_proxy_and_costs_the_rollout(
    tmp_path: Path, judge_model: FakeModelServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("OPENAI_API_KEY", "sk-judge-SECRET-0123456789")
    rows = [{"env": "mini", "id": "judged", "args": {"text": "hi"}, "slug": "judged"}]
    cfg = _batch(tmp_path, rows, judge=f"openai/gpt-4.1-mini@{judge_model.url}")
    out = tmp_path / "out"
    result = await aexecute(cfg, out)
    assert result.counts == {"completed": 1}, result
    rec = _record(out, "judged--solver--r1")
    assert rec["reward"] == pytest.approx(0.8)
    assert rec["cost"] and rec["cost"] > 0  # the judge's turn, priced as gpt-4.1-mini
    assert len([r for r in judge_model.requests if r.api != "models"]) == 1
    for path in out.rglob("*"):
        if path.is_file():
            assert b"sk-judge-SECRET" not in path.read_bytes(), path


def test_a_judge_with_the_ray_executor_is_refused(tmp_path: Path) -> None:
    rows = [{"env": "mini", "id": "judged", "args": {"text": "hi"}, "slug": "judged"}]
    cfg = _batch(
        tmp_path, rows, judge="openai/gpt-4.1-mini", executor={"kind": "ray", "address": "auto"}
    )
    checked = plan(cfg, skip_model_check=True)
    assert "judge: executor 'ray'" in checked.check("config").reason
