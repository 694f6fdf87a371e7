"""`examples/support` as a batch: a `ToolAgent` behind the batch's interception proxy
talks to both customers, the model-played one through the batch's `user_model` proxy;
the samples exported from the output hold the user's replies only as context (tool
results of `talk_to_user`), never as a turn to train on, and none of the user model's
turns."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from test_support_example import EXAMPLE, OPENING, _policy_module, _rollout_page

from proctor.batch import aexecute, plan
from proctor.samples import samples_from_batch
from proctor.store import list_rollouts, read_record, read_rollout
from proctor.testing import FakeModelServer, FakeRequest, Reply


async def test_a_batch_records_both_dialogues_and_exports_them_masked(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    policy = _policy_module()
    agent, user = policy.agent_policy, policy.user_policy

    def either(request: FakeRequest) -> Reply:
        system = [m for m in request.messages if m["role"] == "system"]
        plays_user = system and str(system[0]["content"]).startswith("You play a user")
        return user(request) if plays_user else agent(request)

    async with FakeModelServer(either, models=("fake-model", "gpt-4.1-mini")) as fake:
        monkeypatch.setenv("SUPPORT_MODEL_USER", "1")
        monkeypatch.setenv("OPENAI_API_KEY", "sk-user-model-SECRET-0123456789")
        config = tmp_path / "support.json"
        config.write_text(
            json.dumps(
                {
                    "name": "support",
                    "taskset": {"source": str(EXAMPLE / "tasks.py")},
                    "agents": [
                        {"kind": "tool", "name": "fake", "model": f"fake/fake-model@{fake.url}"}
                    ],
                    "runtime": {"kind": "local", "trusted": True},
                    "expected_rollouts": 2,
                    "max_concurrent": 2,
                    "timeouts": {"rollout": 120},
                    "user_model": f"openai/gpt-4.1-mini@{fake.url}",
                }
            )
        )
        result = await aexecute(config, tmp_path / "out")
    assert result.launched, result
    out = tmp_path / "out"
    records = [read_record(out, row["id"]) for row in list_rollouts(out, limit=None)]
    assert sorted(r["result"]["grade"]["reward"] for r in records) == [1.0, 1.0], records
    [played] = [r for r in records if r["cost"]]  # only its user model is priced
    rollout = read_rollout(out, played["id"])
    users = [s for s in rollout["trace"] if s["kind"] == "model_turn" and s["data"].get("user")]
    assert len(users) == 3  # on the trace, marked; the agent's turns are the proxy's own
    assert rollout["model_turns"] and all("user" not in t for t in rollout["model_turns"])
    page = await _rollout_page(out, played["id"])  # the agent's turns, each with its line
    assert page.count('class="item turn"') == len(rollout["model_turns"]) == 4
    assert page.count("request sha256") == 4
    for path in out.rglob("*"):
        assert not path.is_file() or b"sk-user-model-SECRET" not in path.read_bytes(), path
    samples = list(samples_from_batch(tmp_path / "out"))
    assert len(samples) == 2
    for sample in samples:
        replies = [m["content"] for m in sample.completion if m.get("role") == "tool"]
        assert replies[-1] == "The user has ended the conversation."
        assert any("broken" in r for r in replies)  # the customer, as context
        trained = [m for m in sample.completion if m.get("role") == "assistant"]
        assert all("broken" not in json.dumps(m) for m in trained)
        assert OPENING in json.dumps(sample.prompt)


def _config(tmp_path: Path, **extra: Any) -> Path:
    path = tmp_path / "support.json"
    doc = {
        "name": "support",
        "taskset": {"source": str(EXAMPLE / "tasks.py")},
        "agents": [{"kind": "python", "agent": str(EXAMPLE / "policy.py") + ":OfflineAgent"}],
        "runtime": {"kind": "local", "trusted": True},
        "expected_rollouts": 1,
        "max_concurrent": 1,
        "user_model": "openai/gpt-4.1-mini",
        **extra,
    }
    path.write_text(json.dumps(doc))
    return path


def test_the_plan_checks_the_user_models_key_and_price(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("OPENAI_API_KEY", raising=False)
    checked = plan(_config(tmp_path), skip_model_check=True)
    assert checked.check("credentials").reason == (
        "OPENAI_API_KEY is not set (needed by user model)"
    )
    assert checked.check("pricing").ok, checked.check("pricing")
    unpriced = plan(_config(tmp_path, user_model="openai/no-such-model-x"))
    assert unpriced.check("pricing").details["unpriced"] == ["openai/no-such-model-x"]
    ray = plan(_config(tmp_path, executor={"kind": "ray", "address": "auto"}))
    assert "user_model: executor 'ray'" in ray.check("config").reason
