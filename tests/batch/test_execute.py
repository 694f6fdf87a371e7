"""Executing and resuming a batch: what lands in the output directory, and what does not.

Every test runs a real batch (local, subprocess or served runtime; the fake model server
for model agents) into `tmp_path` and reads it back through the public readers.
"""

from __future__ import annotations

import asyncio
import contextlib
import io
import json
import os
import signal
import subprocess
import sys
import threading
import uuid
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import pytest
from exec_env import (
    BROKEN,
    LEAK,
    ROWS,
    SHUTDOWN_BOOM,
    config,
    flaky_gate,
    workspace,
    write_config,
)

from _support.signals import default_sigint, sigint_once
from _support.waiting import until, wait_until
from proctor import LocalRuntime, Task
from proctor._errors import RemoteError, RuntimeLaunchError, StoreError
from proctor.agents import agent_from_fn
from proctor.batch import (
    BatchResult,
    aexecute,
    aplan,
    aresume,
    count_rollouts,
    execute,
    list_rollouts,
    read_batch,
    read_events,
    read_rollout,
    resume,
)
from proctor.engine import rollout
from proctor.testing import FakeModelServer, FakeRequest, Reply

PROCTOR = str(Path(sys.executable).with_name("proctor"))
MODEL = "gpt-4.1-mini"
KEY = "sk-test-SECRET-123456789"
SERVICE_TOKEN = "svc-token-SECRET-987654321"
SERVER_TOKEN = "srv-token-SECRET-555666777"


@pytest.fixture(autouse=True)
def no_provider_keys(monkeypatch: pytest.MonkeyPatch) -> None:
    for var in ("OPENAI_API_KEY", "ANTHROPIC_API_KEY", "RAY_ADDRESS", "MY_SERVICE_TOKEN"):
        monkeypatch.delenv(var, raising=False)


def solve(request: FakeRequest) -> Reply:
    """Answer the task in the first user message (the mini environment's prompts)."""
    text = next((m.get("content") for m in request.json["messages"] if m.get("role") == "user"), "")
    if text.startswith("What is"):
        a, _, b = text.removeprefix("What is ").rstrip("?").partition(" + ")
        return Reply(text=str(int(a) + int(b)))
    return Reply(text=text.removeprefix("Say "))


@pytest.fixture
def policy() -> list[Any]:
    """`fake`'s policy, replaceable by a test: `policy[0] = ...`."""
    return [solve]


@pytest.fixture
async def fake(policy: list[Any]) -> AsyncIterator[FakeModelServer]:
    """A fake model server listing gpt-4.1-mini (priced), answering with `policy[0]`."""
    async with FakeModelServer(lambda r: policy[0](r), models=(MODEL,)) as server:
        yield server


def tool_agent(fake: FakeModelServer, **extra: Any) -> dict[str, Any]:
    return {"kind": "tool", "model": f"openai/{MODEL}@{fake.url}", "name": "tool", **extra}


def batch_of(tmp_path: Path, rows: list[dict[str, Any]] | None = None, **overrides: Any) -> Path:
    """Write the workspace and a config (`overrides` over the default); the config path."""
    workspace(tmp_path, rows)
    if rows is not None:
        overrides.setdefault("expected_rollouts", len(rows) * len(overrides.get("agents", [1])))
    return write_config(tmp_path, config(**overrides))


def record(out: Path, rollout_id: str) -> dict[str, Any]:
    rec = read_rollout(out, rollout_id)["record"]
    assert rec is not None, rollout_id
    return rec


def events(out: Path, kind: str) -> list[dict[str, Any]]:
    return [e for e in read_events(out) if e["type"] == kind]


def cli(*args: str, check: int | None = 0, **kwargs: Any) -> subprocess.CompletedProcess[str]:
    proc = subprocess.run(
        [PROCTOR, *args], capture_output=True, text=True, timeout=60, check=False, **kwargs
    )
    if check is not None:
        assert proc.returncode == check, proc.stderr
    return proc


# -- 1. the happy path, and nothing made when the plan refuses ------------------------


def test_durability_given_on_the_command_line_is_what_ran(tmp_path: Path) -> None:
    cfg = batch_of(tmp_path)
    out = tmp_path / "out"
    cli(
        "batch",
        str(cfg),
        "--execute",
        "--output-dir",
        str(out),
        "--quiet",
        "--durability",
        "strict",
    )
    assert read_batch(out)["config"]["durability"] == "strict"
    proc = cli("batch", "--resume", str(out), "--quiet", "--durability", "strict")
    assert json.loads(proc.stdout)["ran"] == 0


@pytest.mark.parametrize("durability", ["default", "strict"])
def test_a_batch_completes_every_rollout_and_records_how_it_ran(
    tmp_path: Path, durability: str
) -> None:
    out = tmp_path / "out"
    result = execute(batch_of(tmp_path, durability=durability), out, view=io.StringIO())
    assert result.launched and result.exit_code == 0
    assert result.counts == {"completed": 3} and result.ran == 3
    assert result.evaluation_failed == 0 and result.teardown_errors == 0
    assert result.stopped is None and result.output_dir == str(out)
    for row in list_rollouts(out):
        rec = record(out, row["id"])
        assert rec["status"] == "completed" and rec["phase"] == "done"
        assert rec["reward"] == 1.0 and rec["error"] is None
        assert rec["result"]["evaluation"] == "ok"
        assert rec["result"]["grade"]["reward"] == 1.0
        assert rec["launch_attempts"] == 1 and rec["attempt"] == 1
    assert record(out, "echo-hi--solver--r1")["answer"] == "hi"
    runner = events(out, "runner")
    assert [(e["pid"], e["mode"]) for e in runner] == [(os.getpid(), "execute")]
    (finished,) = events(out, "finished")
    assert finished["counts"] == {"completed": 3}
    batch = read_batch(out)
    assert batch["config"]["name"] == "exec" and len(batch["config_digest"]) == 64
    assert batch["batch_id"] == result.batch_id and batch["batch_id"].startswith("exec-")
    assert batch["versions"]["environment"] == {"name": "mini", "version": "1.2.0"}
    assert batch["versions"]["proctor"] and batch["versions"]["python"]
    assert batch["pricing"] == {}  # no model: nothing to price
    assert batch["config_file"] == str(tmp_path / "batch.json")


def test_batch_json_names_the_runner(tmp_path: Path) -> None:
    out = tmp_path / "out"
    execute(batch_of(tmp_path), out)
    runner = read_batch(out)["runner"]
    assert runner["pid"] == os.getpid() and runner["host"] and runner["start_time"]


def test_the_cli_executes_and_prints_the_result(tmp_path: Path) -> None:
    cfg = batch_of(tmp_path)
    out = tmp_path / "out"
    proc = cli("batch", str(cfg), "--execute", "--output-dir", str(out))
    assert f"batch output: {out}" in proc.stderr  # after the live view, on stderr
    doc = json.loads(proc.stdout)
    assert doc["launched"] is True and doc["counts"] == {"completed": 3}
    assert "plan" not in doc
    assert count_rollouts(out) == {"completed": 3}


MISTAKES: dict[str, tuple[dict[str, Any], list[dict[str, Any]] | None, str]] = {
    "unknown field": ({"max_concurency": 2}, None, "config"),
    "count mismatch": ({"expected_rollouts": 4}, None, "count"),
    "missing credential": (
        {"agents": [{"kind": "tool", "model": "openai/gpt-4.1-mini"}]},
        None,
        "credentials",
    ),
    "wrong environment version": ({"environment_version": "2.0.0"}, None, "environment"),
    "unknown template": (
        {},
        [*ROWS[:2], {"env": "mini", "id": "nope", "args": {}, "slug": "nope"}],
        "environment",
    ),
    "bad args": (
        {},
        [*ROWS[:2], {"env": "mini", "id": "add", "args": {"a": 1}, "slug": "bad"}],
        "environment",
    ),
}


@pytest.mark.parametrize("mistake", list(MISTAKES))
def test_a_refused_plan_creates_no_output_dir(tmp_path: Path, mistake: str) -> None:
    overrides, rows, check = MISTAKES[mistake]
    workspace(tmp_path, rows)
    cfg = write_config(tmp_path, config(**overrides))
    out = tmp_path / "out"
    result = execute(cfg, out)
    assert not result.launched and result.output_dir is None
    assert result.plan is not None and check in {c.name for c in result.plan.checks if not c.ok}
    assert result.exit_code == 1
    assert not out.exists()


async def test_a_model_missing_from_the_catalog_creates_no_output_dir(
    tmp_path: Path, fake: FakeModelServer
) -> None:
    cfg = batch_of(tmp_path, agents=[{"kind": "tool", "model": f"openai/gpt-4o@{fake.url}"}])
    result = await aexecute(cfg, tmp_path / "out")
    assert result.plan is not None
    assert [c.name for c in result.plan.checks if not c.ok] == ["models"]
    assert not (tmp_path / "out").exists()
    assert all(r.api == "models" for r in fake.requests)  # only the catalog was asked


def test_the_cli_refuses_a_bad_plan_without_making_the_dir(tmp_path: Path) -> None:
    workspace(tmp_path)
    cfg = write_config(tmp_path, config(expected_rollouts=7))
    out = tmp_path / "out"
    proc = cli("batch", str(cfg), "--execute", "--output-dir", str(out), "--quiet", check=1)
    doc = json.loads(proc.stdout)
    assert doc["launched"] is False and doc["plan"]["ok"] is False
    assert "plan: not ok (count)" in proc.stderr
    assert not out.exists()


def test_an_existing_output_dir_is_refused_before_anything_runs(tmp_path: Path) -> None:
    cfg = batch_of(tmp_path)
    out = tmp_path / "out"
    out.mkdir()
    (out / "keep.txt").write_text("mine")
    with pytest.raises(StoreError, match="already exists"):
        execute(cfg, out)
    assert [p.name for p in out.iterdir()] == ["keep.txt"]


# -- 2. model turns through the proxy -------------------------------------------------


async def test_a_tool_agent_records_every_model_turn_with_usage_and_cost(
    tmp_path: Path, fake: FakeModelServer
) -> None:
    out = tmp_path / "out"
    result = await aexecute(batch_of(tmp_path, agents=[tool_agent(fake)]), out)
    assert result.exit_code == 0, result
    calls = [r for r in fake.requests if r.api != "models"]
    turns_seen = 0
    total_cost = 0.0
    for row in list_rollouts(out):
        rollout_data = read_rollout(out, row["id"])
        rec, turns = rollout_data["record"], rollout_data["model_turns"]
        assert rec["reward"] == 1.0 and rec["model"] == f"openai/{MODEL}@{fake.url}"
        assert [t["turn"] for t in turns] == [1]
        for t in turns:
            assert len(t["request_sha256"]) == 64
            assert t["usage"]["input_tokens"] > 0 and t["cost"] > 0
        assert rec["usage"]["input_tokens"] == sum(t["usage"]["input_tokens"] for t in turns)
        assert rec["usage"]["output_tokens"] == sum(t["usage"]["output_tokens"] for t in turns)
        assert rec["cost"] == pytest.approx(sum(t["cost"] for t in turns))
        turns_seen += len(turns)
        total_cost += rec["cost"]
    assert turns_seen == len(calls) == 3
    assert result.cost_usd == pytest.approx(total_cost)
    pricing = read_batch(out)["pricing"][f"openai/{MODEL}@{fake.url}"]
    assert pricing["model"] == MODEL and pricing["price"]["input"] > 0


# -- 3. the batch cost cap ------------------------------------------------------------


def always_a_tool_call(request: FakeRequest) -> Reply:
    return Reply.tool("nothing", x=1)


async def test_the_batch_cost_cap_stops_launching_and_stops_turns_at_the_proxy(
    tmp_path: Path, fake: FakeModelServer, policy: list[Any]
) -> None:
    policy[0] = always_a_tool_call
    rows = [
        {"env": "mini", "id": "add", "args": {"a": i, "b": 1}, "slug": f"a{i}"} for i in range(6)
    ]
    cfg = batch_of(
        tmp_path, rows, agents=[tool_agent(fake, max_steps=5)], cost_cap=1e-9, max_concurrent=2
    )
    out = tmp_path / "out"
    result = await aexecute(cfg, out)
    assert result.stopped == "batch_cost_cap" and result.exit_code != 0
    assert result.counts.get("queued", 0) > 0
    (cap,) = events(out, "cost_cap")
    assert cap["cap"] == 1e-9 and cap["spent"] >= 1e-9
    ran = list_rollouts(out, status=["completed", "failed"])
    assert ran and all(record(out, r["id"])["stop_reason"] == "batch_cost_cap" for r in ran)
    for r in ran:  # stopped at the proxy, still graded
        assert record(out, r["id"])["result"]["evaluation"] == "ok"
    asked = len(fake.requests)
    again = await aresume(out)  # the cap is still spent: nothing is launched
    assert again.ran == 0 and again.stopped == "batch_cost_cap" and again.counts == result.counts
    assert len(fake.requests) == asked


# -- 4. per-rollout limits ------------------------------------------------------------


async def test_max_turns_stops_a_rollout_at_the_proxy_and_it_is_still_graded(
    tmp_path: Path, fake: FakeModelServer, policy: list[Any]
) -> None:
    policy[0] = always_a_tool_call
    cfg = batch_of(
        tmp_path, ROWS[:1], agents=[tool_agent(fake, max_steps=5)], limits={"max_turns": 1}
    )
    out = tmp_path / "out"
    result = await aexecute(cfg, out)
    rec = record(out, "add-1-2--tool--r1")
    assert rec["stop_reason"] == "max_turns"
    assert rec["status"] == "completed" and rec["result"]["evaluation"] == "ok"
    assert rec["reward"] == 0.0 and result.counts == {"completed": 1}
    assert len(read_rollout(out, "add-1-2--tool--r1")["model_turns"]) == 1
    assert len([r for r in fake.requests if r.api != "models"]) == 1


# -- 5. failures: grading and agent ---------------------------------------------------


def test_a_grading_failure_is_failed_never_a_zero_reward(tmp_path: Path) -> None:
    out = tmp_path / "out"
    result = execute(batch_of(tmp_path, [ROWS[0], BROKEN]), out)
    assert result.evaluation_failed == 1 and result.exit_code == 1
    assert result.counts == {"completed": 1, "failed": 1}
    rollout_data = read_rollout(out, "broken--solver--r1")
    rec = rollout_data["record"]
    assert rec["status"] == "failed" and rec["reward"] is None
    assert rec["error"]["phase"] == "grading" and "grader boom" in rec["error"]["message"]
    assert rec["result"]["evaluation"] == "failed" and rec["result"]["grade"] is None
    assert rollout_data["evaluation"]["status"] == "failed"
    assert (out / "rollouts" / "broken--solver--r1" / "evaluation" / "status.json").is_file()


def test_an_agent_exception_fails_in_the_agent_phase_with_no_reward(tmp_path: Path) -> None:
    out = tmp_path / "out"
    cfg = batch_of(tmp_path, ROWS[:1], agents=[{"kind": "python", "agent": "agents.py:boom"}])
    result = execute(cfg, out)
    assert result.exit_code == 1 and result.evaluation_failed == 0
    rec = record(out, "add-1-2--boom--r1")
    assert rec["status"] == "failed" and rec["reward"] is None
    error = dict(rec["error"])
    assert "agents.py" in error.pop("traceback")  # where it was raised
    assert error == {"phase": "agent", "type": "RuntimeError", "message": "agent boom"}
    assert rec["result"]["evaluation"] is None


# -- 6. a teardown failure after the grade --------------------------------------------


def test_a_teardown_failure_after_the_grade_keeps_the_reward(tmp_path: Path) -> None:
    workspace(tmp_path, ROWS[:1], env_extra=SHUTDOWN_BOOM)
    cfg = write_config(tmp_path, config(expected_rollouts=1, runtime={"kind": "subprocess"}))
    out = tmp_path / "out"
    result = execute(cfg, out)  # a process per rollout: its shutdown hook runs per rollout
    rec = record(out, "add-1-2--solver--r1")
    assert rec["status"] == "completed" and rec["reward"] == 1.0
    assert rec["error"]["phase"] == "teardown" and "shutdown boom" in rec["error"]["message"]
    assert rec["result"]["evaluation"] == "ok"
    assert result.teardown_errors == 1 and result.counts == {"completed": 1}
    assert result.exit_code == 0  # graded: a teardown error does not fail the batch


def test_a_runtime_that_fails_to_close_still_gives_a_result(tmp_path: Path) -> None:
    workspace(tmp_path, ROWS[:1], env_extra=SHUTDOWN_BOOM)
    cfg = write_config(tmp_path, config(expected_rollouts=1))
    out = tmp_path / "out"
    result = execute(cfg, out)
    assert result.counts == {"completed": 1}
    assert record(out, "add-1-2--solver--r1")["reward"] == 1.0


# -- 7. launch retries ----------------------------------------------------------------


class Flaky:
    """A `LocalRuntime` whose first `failures` launches fail (with `error`)."""

    def __init__(self, source: Path, failures: int, error: Exception) -> None:
        self.inner = LocalRuntime(source)
        self.failures = failures
        self.error = error
        self.calls = 0

    def __call__(self, task: Task) -> contextlib.AbstractAsyncContextManager[Any]:
        self.calls += 1
        if self.calls <= self.failures:
            raise self.error
        return self.inner(task)


async def solver_fn(prompt: str) -> str:
    return "3"


TASK = Task(env="mini", id="add", args={"a": 1, "b": 2})


async def test_a_failed_launch_is_retried_on_a_fresh_substrate(tmp_path: Path) -> None:
    workspace(tmp_path)
    runtime = Flaky(tmp_path / "env.py", 1, RuntimeLaunchError("no room"))
    run = await rollout(TASK, agent_from_fn(solver_fn), runtime=runtime, launch_retries=1)
    assert run.status == "completed" and run.reward == 1.0
    assert run.launch_attempts == 2 and runtime.calls == 2
    assert [(e.phase, e.type, e.message) for e in run.launch_errors] == [
        ("provisioning", "RuntimeLaunchError", "no room")
    ]


async def test_exhausted_launch_retries_fail_in_provisioning(tmp_path: Path) -> None:
    workspace(tmp_path)
    runtime = Flaky(tmp_path / "env.py", 5, RuntimeLaunchError("no room"))
    run = await rollout(TASK, agent_from_fn(solver_fn), runtime=runtime, launch_retries=2)
    assert run.status == "failed" and run.reward is None
    assert run.error is not None and run.error.phase == "provisioning"
    assert run.launch_attempts == 3 and runtime.calls == 3 and len(run.launch_errors) == 2


async def test_a_tasks_own_start_error_is_not_retried(tmp_path: Path) -> None:
    workspace(tmp_path)
    runtime = Flaky(tmp_path / "env.py", 0, RuntimeLaunchError("unused"))
    bad = Task(env="mini", id="add", args={"a": "one", "b": 2})
    run = await rollout(bad, agent_from_fn(solver_fn), runtime=runtime, launch_retries=3)
    assert run.status == "failed" and run.error is not None and run.error.phase == "starting"
    assert run.error.type == RemoteError.__name__ and "argument 'a'" in run.error.message
    assert run.launch_attempts == 1 and runtime.calls == 1 and run.launch_errors == []


def test_a_batch_retries_a_launch_and_records_it(tmp_path: Path) -> None:
    out = tmp_path / "out"
    with flaky_gate() as port:
        runtime = {"kind": "subprocess", "env": {"EXEC_FLAKY": port}}
        result = execute(batch_of(tmp_path, ROWS[:1], runtime=runtime, launch_retries=1), out)
    assert result.exit_code == 0, result
    rec = record(out, "add-1-2--solver--r1")
    assert rec["launch_attempts"] == 2 and rec["reward"] == 1.0
    assert len(rec["launch_errors"]) == 1
    (retry,) = events(out, "launch_retry")
    assert retry["id"] == "add-1-2--solver--r1"


def test_a_launch_retry_event_names_its_attempt(tmp_path: Path) -> None:
    out = tmp_path / "out"
    with flaky_gate() as port:
        runtime = {"kind": "subprocess", "env": {"EXEC_FLAKY": port}}
        execute(batch_of(tmp_path, ROWS[:1], runtime=runtime, launch_retries=1), out)
    (retry,) = events(out, "launch_retry")
    assert retry["attempt"] == 1 and "flaky launch" in retry["error"]


# -- 8. secrets -----------------------------------------------------------------------


@pytest.fixture
def served(tmp_path: Path) -> Iterator[str]:
    """The workspace's environment served by `proctor serve` with a token: its URL."""
    workspace(tmp_path, [LEAK])
    env = {
        **os.environ,
        "EXEC_SRV": SERVER_TOKEN,
        "OPENAI_API_KEY": KEY,
        "MY_SERVICE_TOKEN": SERVICE_TOKEN,
    }
    proc = subprocess.Popen(
        [PROCTOR, "serve", str(tmp_path / "env.py"), "--token-env", "EXEC_SRV"],
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
        text=True,
        env=env,
    )
    try:
        assert proc.stdout is not None
        line = proc.stdout.readline()
        assert line.startswith("PROCTOR_SERVE_PORT="), line
        yield f"tcp://127.0.0.1:{line.strip().partition('=')[2]}"
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=15)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
        assert proc.stdout is not None
        proc.stdout.close()


def leaked(out: Path, secrets: list[str]) -> list[str]:
    found = []
    for path in out.rglob("*"):
        if path.is_file():
            data = path.read_bytes()
            found += [f"{path.name}: {s}" for s in secrets if s.encode() in data]
    return found


async def test_no_secret_reaches_any_file_of_the_output(
    tmp_path: Path, served: str, fake: FakeModelServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("OPENAI_API_KEY", KEY)
    monkeypatch.setenv("MY_SERVICE_TOKEN", SERVICE_TOKEN)
    monkeypatch.setenv("EXEC_SRV", SERVER_TOKEN)
    cfg = write_config(
        tmp_path,
        config(
            taskset={"source": "tasks.json"},
            runtime={"kind": "url", "url": served, "token_env": "EXEC_SRV"},
            agents=[
                {"kind": "python", "agent": "agents.py:leaky"},
                {"kind": "python", "agent": "agents.py:leaky_boom"},
                tool_agent(fake),
            ],
            expected_rollouts=3,
        ),
    )
    out = tmp_path / "out"
    result = await aexecute(cfg, out)
    assert result.counts == {"completed": 2, "failed": 1}, result
    # the secrets did travel: the served env put them in its prompt, the model saw it
    calls = [r for r in fake.requests if r.api != "models"]
    assert calls and KEY.encode() in calls[0].body
    assert leaked(out, [KEY, SERVICE_TOKEN, SERVER_TOKEN]) == []
    for rollout_id in ("leak--leaky--r1", "leak--leaky_boom--r1", "leak--tool--r1"):
        assert "[redacted]" in json.dumps(read_rollout(out, rollout_id)), rollout_id


# -- 9. resume ------------------------------------------------------------------------


def test_resuming_a_completed_batch_runs_nothing(tmp_path: Path) -> None:
    out = tmp_path / "out"
    execute(batch_of(tmp_path), out)
    again = resume(out)
    assert again.ran == 0 and again.counts == {"completed": 3} and again.exit_code == 0
    assert [e["mode"] for e in events(out, "runner")] == ["execute", "resume"]


def test_resume_refuses_an_edited_config(tmp_path: Path) -> None:
    cfg = batch_of(tmp_path)
    out = tmp_path / "out"
    execute(cfg, out)
    cfg.write_text(json.dumps(config(max_concurrent=1), indent=2))
    with pytest.raises(StoreError, match="changed since the batch started"):
        resume(out)
    proc = cli("batch", "--resume", str(out), "--quiet", check=None)
    assert proc.returncode not in (0, 130) and "changed since the batch started" in proc.stderr
    assert "Traceback" not in proc.stderr
    assert len(events(out, "runner")) == 1


def test_resume_refuses_an_edited_taskset(tmp_path: Path) -> None:
    cfg = batch_of(tmp_path)
    out = tmp_path / "out"
    execute(cfg, out)
    rows = [{**ROWS[0], "args": {"a": 5, "b": 5}}, *ROWS[1:]]
    (tmp_path / "tasks.json").write_text(json.dumps(rows))
    with pytest.raises(StoreError, match="changed since the batch started"):
        resume(out)


def test_the_interrupted_event_names_the_signal(tmp_path: Path) -> None:
    cfg = batch_of(tmp_path, agents=[{"kind": "python", "agent": "agents.py:blocker"}])
    out = tmp_path / "out"

    def interrupt() -> None:
        if wait_until(lambda: any(tmp_path.glob("started-*")), within=30):
            os.kill(os.getpid(), signal.SIGINT)  # execute() turns it into a cancel
        else:
            (tmp_path / "gate").write_text("open")  # never started: let the batch end

    killer = threading.Thread(target=interrupt)
    killer.start()
    try:
        result = execute(cfg, out)
    finally:
        killer.join()
    assert result.stopped == "interrupted" and result.exit_code == 130
    (event,) = events(out, "interrupted")
    assert event["signal"] in ("SIGINT", int(signal.SIGINT))


async def test_a_retried_attempt_starts_its_model_turns_afresh(
    tmp_path: Path, fake: FakeModelServer
) -> None:
    out = tmp_path / "out"
    first = await aexecute(batch_of(tmp_path, [ROWS[0], BROKEN], agents=[tool_agent(fake)]), out)
    assert first.counts == {"completed": 1, "failed": 1}
    retried = await aresume(out, retry_errors=True)
    assert retried.ran == 1
    data = read_rollout(out, "broken--tool--r1")
    assert data["record"]["attempt"] == 2 and data["attempts"] == [1]
    assert [t["turn"] for t in data["model_turns"]] == [1]
    assert data["record"]["cost"] == pytest.approx(data["model_turns"][0]["cost"])
    old = out / "rollouts" / "broken--tool--r1" / "attempts" / "1" / "model_turns.jsonl"
    assert len(old.read_text().splitlines()) == 1
    assert len([r for r in fake.requests if r.api != "models"]) == 3


async def test_what_an_archived_attempt_spent_still_counts(
    tmp_path: Path, fake: FakeModelServer
) -> None:
    out = tmp_path / "out"
    await aexecute(batch_of(tmp_path, [ROWS[0], BROKEN], agents=[tool_agent(fake)]), out)
    retried = await aresume(out, retry_errors=True)
    later = await aresume(out)
    assert later.ran == 0
    assert later.cost_usd == pytest.approx(retried.cost_usd)


def test_an_interrupted_cli_batch_resumes_what_is_left(tmp_path: Path) -> None:
    cfg = batch_of(
        tmp_path, agents=[{"kind": "python", "agent": "agents.py:blocker"}], max_concurrent=1
    )
    out = tmp_path / "out"
    child = subprocess.Popen(
        [PROCTOR, "batch", str(cfg), "--execute", "--output-dir", str(out), "--quiet"],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        preexec_fn=default_sigint,  # a SIGINT-ignoring shell must not make it deaf
    )

    def second_runner_refused() -> None:
        with pytest.raises(StoreError):  # the child runs it: no second runner
            resume(out)

    stdout, stderr = sigint_once(
        child, (tmp_path / "started-add-1-2").exists, then=second_runner_refused
    )
    assert child.returncode == 130, stderr
    doc = json.loads(stdout)
    assert doc["stopped"] == "interrupted"
    assert count_rollouts(out) == {"interrupted": 1, "queued": 2}
    rec = record(out, "add-1-2--blocker--r1")
    assert rec["status"] == "interrupted" and rec["phase"] == "agent" and rec["reward"] is None
    assert events(out, "interrupted")

    (tmp_path / "gate").write_text("open")
    proc = cli("batch", "--resume", str(out), "--quiet", check=1)  # one is still interrupted
    assert json.loads(proc.stdout)["ran"] == 2
    assert count_rollouts(out) == {"completed": 2, "interrupted": 1}

    cli("batch", "--resume", str(out), "--retry-errors", "--quiet", check=0)
    assert count_rollouts(out) == {"completed": 3}
    assert read_rollout(out, "add-1-2--blocker--r1")["attempts"] == [1]
    assert [e["mode"] for e in events(out, "runner")] == ["execute", "resume", "resume"]


async def test_a_cancelled_batch_records_its_in_flight_rollouts_interrupted(
    tmp_path: Path,
) -> None:
    cfg = batch_of(
        tmp_path, agents=[{"kind": "python", "agent": "agents.py:blocker"}], max_concurrent=2
    )
    out = tmp_path / "out"
    task = asyncio.create_task(aexecute(cfg, out))
    await until(lambda: len(list(tmp_path.glob("started-*"))) == 2, "two rollouts in flight")
    task.cancel()
    result = await task
    assert result.stopped == "interrupted" and result.exit_code == 130
    assert result.counts == {"interrupted": 2, "queued": 1}
    for row in list_rollouts(out, status="interrupted"):
        rec = record(out, row["id"])
        assert rec["phase"] == "agent" and rec["reward"] is None
    kinds = [e["type"] for e in read_events(out)]
    assert "interrupted" in kinds and kinds[-1] == "finished"


# -- 10. the report -------------------------------------------------------------------


def test_the_report_reads_an_executed_dir(tmp_path: Path) -> None:
    out = tmp_path / "out"
    result = execute(batch_of(tmp_path, [*ROWS, BROKEN]), out)
    doc = json.loads(cli("batch", "report", str(out), "--json").stdout)
    assert doc["batch_id"] == result.batch_id and doc["name"] == "exec"
    totals = doc["totals"]
    assert totals["rollouts"] == 4 and totals["graded"] == 3 and totals["mean_reward"] == 1.0
    assert totals["by_status"]["completed"] == 3 and totals["by_status"]["failed"] == 1
    assert totals["errors_by_phase"] == {"grading": 1}
    text = cli("batch", "report", str(out)).stdout
    assert f"Batch exec ({result.batch_id})" in text
    assert "4 rollouts: completed 3, failed 1" in text


def test_the_result_json_round_trips(tmp_path: Path) -> None:
    result = execute(batch_of(tmp_path), tmp_path / "out")
    assert BatchResult.model_validate_json(result.to_json()).counts == result.counts


async def test_a_profile_agent_records_the_settings_and_price_it_ran_with(
    tmp_path: Path, fake: FakeModelServer
) -> None:
    from proctor.models import ModelProfile, Price, register_profile

    name = f"batch-chat-{uuid.uuid4().hex[:8]}"
    register_profile(
        ModelProfile(name, 1, f"openai/{MODEL}@{fake.url}", price=Price(input=7.0, output=9.0))
    )
    agent = {"kind": "tool", "model": f"profile:{name}@1", "name": "tool"}
    out = tmp_path / "out"
    cfg = batch_of(tmp_path, agents=[agent], limits={"max_total_tokens": 1000})
    planned = await aplan(cfg)
    assert planned.check("pricing").ok and planned.projected_cost_usd == pytest.approx(
        3 * 1000 * 9.0 / 1e6  # three rows, each bounded by 1,000 tokens at the dearer price
    )
    result = await aexecute(cfg, out)
    assert result.exit_code == 0, result
    meta = read_batch(out)
    recorded = meta["profiles"][f"profile:{name}@1"]
    assert recorded["profile"] == f"{name}@1" and recorded["model"] == f"openai/{MODEL}@{fake.url}"
    price = meta["pricing"][f"profile:{name}@1"]["price"]
    assert price["input"] == 7.0 and price["output"] == 9.0  # the profile's, not the table's
