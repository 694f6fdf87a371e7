"""kill -9 of a batch runner mid-dialogue, then `--resume`: the parked session's
simulated user, played by the batch's `user_model`, asks the resuming runner's proxy
(`tasks.user`) instead of the dead runner's, so the dialogue completes and the user's
later turns are priced on the rollout. The user turn the dead runner's session served
(kept in `user_turns.jsonl` as it came) counts in the continued rollout's usage and
cost, and in the batch report's, once; no training sample holds a user turn.

The agent asks the customer once, then runs a slow shell command; the runner is killed
during it (no model turn in flight), under a lease so the server outlives it.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from proctor.batch._report import report
from proctor.samples import samples_from_batch
from proctor.store import list_rollouts, read_events, read_rollout

HERE = Path(__file__).parent
PROCTOR = [sys.executable, "-m", "proctor.cli"]
KEY = "sk-user-resume-test-key-0123456789"
pytestmark = [pytest.mark.timeout(300), pytest.mark.slow]

MODEL = textwrap.dedent(
    """
    import asyncio, json, os, signal, sys
    from proctor.testing import FakeModelServer, Reply

    log = os.open(sys.argv[1], os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)

    def customer(messages):
        heard = sum(1 for m in messages if m.get("role") == "user")
        return ["42", "Yes, refund it."][heard - 1] if heard <= 2 else "###DONE###"

    async def policy(request):
        messages = (request.json or {}).get("messages") or []
        system = str(messages[0].get("content")) if messages else ""
        if system.startswith("You play a user"):
            return customer(messages)
        results = [m for m in messages if m.get("role") == "tool"]
        if not results:
            return Reply.tool("talk_to_user", message="Which order is it?")
        if len(results) == 1:
            os.write(log, b"sleeping\\n")
            return Reply.tool("shell", command="sleep 8; echo checked")
        if len(results) == 2:
            return Reply.tool("talk_to_user", message="Shall I refund order 42?")
        return "REFUND 42"

    async def serve():
        stop = asyncio.Event()
        asyncio.get_running_loop().add_signal_handler(signal.SIGTERM, stop.set)
        models = ["fake-model", "gpt-4.1-mini"]
        async with FakeModelServer(policy, record=False, models=models) as fake:
            print(json.dumps({"url": fake.url}), flush=True)
            await stop.wait()

    asyncio.run(serve())
    """
)


def _env() -> dict[str, str]:
    return {**os.environ, "OPENAI_API_KEY": KEY, "PYTHONUNBUFFERED": "1"}


@pytest.fixture
def model(tmp_path: Path) -> Iterator[dict[str, Any]]:
    script = tmp_path / "model.py"
    script.write_text(MODEL)
    log = tmp_path / "model.log"
    proc = subprocess.Popen([sys.executable, str(script), str(log)], stdout=subprocess.PIPE,
                            text=True, env=_env())  # fmt: skip
    assert proc.stdout is not None
    line = proc.stdout.readline()
    try:
        yield {"url": json.loads(line)["url"], "log": log}
    finally:
        proc.terminate()
        proc.wait(10)
        proc.stdout.close()


def _until(what: str, check: Any, deadline: float = 60.0) -> Any:
    end = time.monotonic() + deadline
    while time.monotonic() < end:
        value = check()
        if value:
            return value
        time.sleep(0.1)
    raise AssertionError(f"{what} within {deadline:g}s")


def test_a_resumed_dialogue_asks_the_resuming_runners_user_model(
    tmp_path: Path, model: dict[str, Any]
) -> None:
    task = {"env": "chatty", "id": "refund", "args": {"order": "42"}, "slug": "refund-42"}
    (tmp_path / "tasks.jsonl").write_text(json.dumps(task) + "\n")
    config = tmp_path / "batch.json"
    config.write_text(json.dumps({
        "name": "user-resume",
        "taskset": {"source": "tasks.jsonl", "env_source": str(HERE / "resume_env.py")},
        "agents": [{"kind": "tool", "name": "fake", "model": f"openai/gpt-4.1-mini@{model['url']}",
                    "max_steps": 6}],
        "runtime": {"kind": "subprocess", "lease": 60},
        "user_model": f"openai/gpt-4.1-mini@{model['url']}",
        "expected_rollouts": 1,
        "max_concurrent": 1,
        "timeouts": {"rollout": 120},
    }))  # fmt: skip
    out = tmp_path / "out"
    argv = [*PROCTOR, "batch", str(config), "--execute", "--output-dir", str(out)]
    runner = subprocess.Popen([*argv, "--skip-model-check", "--quiet"], env=_env(),
                              stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)  # fmt: skip
    log: Path = model["log"]
    _until("the agent ran its slow command", lambda: log.exists() and "sleeping" in log.read_text())
    time.sleep(1.0)  # the turn's answer reached the agent, its checkpoint saved
    runner.kill()
    runner.wait()

    resume = subprocess.run([*PROCTOR, "batch", "--resume", str(out), "--quiet"], env=_env(),
                            capture_output=True, text=True, timeout=180)  # fmt: skip
    assert resume.returncode == 0, resume.stderr
    rows = list_rollouts(out, limit=None)
    assert len(rows) == 1
    row = rows[0]
    assert [ev["type"] for ev in read_events(out) if ev.get("type") == "continued"] == ["continued"]
    rollout = read_rollout(out, row["id"])
    results = [s["content"] for s in rollout["trace"] if s["kind"] == "tool_result"]
    assert (row["status"], row["reward"]) == ("completed", 1.0), results
    assert log.read_text().count("sleeping") == 1  # continued, not started again
    users = [s for s in rollout["trace"] if s["kind"] == "model_turn" and s["data"].get("user")]
    assert len(users) == 1 and users[0]["data"].get("cost")  # the resumed runner's one
    assert rollout["record"]["cost"] >= sum(s["data"]["cost"] for s in users) > 0
    _the_dead_runners_user_turn_counts(out, rollout, users[0]["data"])
    # the batch's spend (its cost_cap's budget) counts the turns the dead runner paid for
    assert json.loads(resume.stdout)["cost_usd"] == pytest.approx(rollout["record"]["cost"])
    for path in out.rglob("*"):
        assert not path.is_file() or KEY.encode() not in path.read_bytes(), path


def _the_dead_runners_user_turn_counts(
    out: Path, rollout: dict[str, Any], resumed: dict[str, Any]
) -> None:
    record = rollout["record"]
    agent = rollout["model_turns"]
    agent_cost = sum(t["cost"] for t in agent)
    assert agent_cost > 0 and all(t["cost"] for t in agent)
    # the user's first turn, served by the dead runner, is priced on the rollout too
    assert record["cost"] - agent_cost - resumed["cost"] > 0.1 * resumed["cost"]
    served = rollout["user_turns"]
    assert len(served) == 2 and all(t["cost"] > 0 and "request" not in t for t in served)
    assert served[1]["cost"] == resumed["cost"]
    assert record["cost"] == pytest.approx(agent_cost + sum(t["cost"] for t in served))
    for key in ("input_tokens", "output_tokens"):
        paid = sum(t["usage"][key] for t in (*agent, *served))
        assert record["usage"][key] == paid, key
    [row] = report(out)["rollouts"]
    assert (row["source"], row["turns"]) == ("turns", len(agent))
    assert row["recomputed_cost"] == pytest.approx(record["cost"])  # each turn once
    assert row["tokens"]["input"] == record["usage"]["input_tokens"]
    [sample] = samples_from_batch(out)  # the agent's turns; the user's never
    for message in (*sample.prompt, *sample.completion):
        assert "You play a user" not in str(message.get("content"))
    trained = [m for m in sample.completion if m.get("role") == "assistant"]
    assert trained and all("Yes, refund it." not in str(m) for m in trained)
