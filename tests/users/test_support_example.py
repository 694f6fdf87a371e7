"""`examples/support` end to end through `proctor run`: a scripted customer and one a
model plays on the fake model server (`--user-model`, through a proxy session of the
rollout's own), the dialogue on the trace, in the record and in the grade the template
computed from it."""

from __future__ import annotations

import asyncio
import importlib.util
import json
import os
import re
import sys
import urllib.request
from pathlib import Path
from typing import Any

from proctor.testing import FakeModelServer
from proctor.view import ViewServer

REPO = Path(__file__).resolve().parents[2]
EXAMPLE = REPO / "examples" / "support"
OPENING = "Hi, something I ordered arrived broken. Can you help?"
USER_KEY = "sk-user-model-SECRET-0123456789"


def _user_policy() -> Any:
    """`examples/support/policy.py`'s customer."""
    return _policy_module().user_policy


def _policy_module() -> Any:
    """`examples/support/policy.py`, loaded by path (beside its `env`)."""
    sys.path.insert(0, str(EXAMPLE))
    try:
        spec = importlib.util.spec_from_file_location("support_policy", EXAMPLE / "policy.py")
        assert spec is not None and spec.loader is not None
        module = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(module)
    finally:
        sys.path.remove(str(EXAMPLE))
    return module


async def _proctor_run(tmp: Path, *flags: str, env: dict[str, str]) -> list[dict[str, Any]]:
    out = tmp / "runs.jsonl"
    argv = [sys.executable, "-m", "proctor.cli", "run", str(EXAMPLE / "tasks.py"), "-v"]
    argv += ["--output", str(out), "--output-dir", str(tmp / "record"), *flags]
    proc = await asyncio.create_subprocess_exec(
        *argv,
        cwd=REPO,
        env=env,
        stdin=asyncio.subprocess.DEVNULL,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
    )
    _, stderr = await asyncio.wait_for(proc.communicate(), 300)
    assert proc.returncode == 0, stderr.decode()[-3000:]
    lines = [json.loads(line) for line in out.read_text().splitlines()]
    return sorted((r for r in lines if "trace" in r), key=lambda r: r["task"]["args"]["order"])


def _dialogue_steps(run: dict[str, Any]) -> list[tuple[str, str]]:
    steps = run["trace"]["steps"]
    return [(s["kind"], s["content"]) for s in steps if (s.get("data") or {}).get("dialogue")]


def _check(run: dict[str, Any], order: str) -> None:
    assert run["status"] == "completed" and run["reward"] == 1.0, run["grade"]
    assert run["trace"]["content"] == f"REFUND {order}"
    spoken = _dialogue_steps(run)
    assert [kind for kind, _ in spoken] == ["assistant", "user", "assistant", "user", "assistant"]
    assert spoken[2] == ("assistant", f"Shall I refund order {order}?")
    dialogue = run["grade"]["info"]["dialogue"]  # the environment's side, as graded
    assert dialogue[0] == {**dialogue[0], "role": "user", "text": OPENING}
    assert [(m["role"], m["text"]) for m in dialogue[1:]] == [
        ("agent" if kind == "assistant" else "user", text) for kind, text in spoken
    ]


async def test_a_scripted_customer_in_a_child_process(tmp_path: Path) -> None:
    env = {k: v for k, v in os.environ.items() if k != "SUPPORT_MODEL_USER"}
    [run] = await _proctor_run(tmp_path, "--runtime", "subprocess", env=env)
    _check(run, "4417")
    assert _dialogue_steps(run)[1] == ("user", "It's order 4417: the teapot arrived broken.")
    record = tmp_path / "record" / "rollouts"
    traces = [p.read_text() for p in record.glob("*/trace.jsonl")]
    assert len(traces) == 1 and "It's order 4417" in traces[0]
    [rid] = [p.name for p in record.iterdir() if p.is_dir()]
    page = await _rollout_page(tmp_path / "record", rid)
    shown = re.search(
        r'<div class="item" data-kind="dialogue" id="dialogue">(.*?)data-kind="answer"', page, re.S
    )
    assert shown is not None, page[-3000:]
    roles = re.findall(r'data-role="(\w+)"', shown[1])
    assert roles == ["agent", "user", "agent", "user", "agent"]
    assert "It&#39;s order 4417: the teapot arrived broken." in shown[1]
    show = await asyncio.create_subprocess_exec(
        *[sys.executable, "-m", "proctor.cli", "show", str(tmp_path / "record"), rid],
        stdin=asyncio.subprocess.DEVNULL,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
    )
    text, _ = await asyncio.wait_for(show.communicate(), 120)
    assert "-- the user replied\nIt's order 4417: the teapot arrived broken." in text.decode()


def _holding(root: Path, text: bytes) -> list[Path]:
    """The files under `root` holding `text`."""
    return [p for p in root.rglob("*") if p.is_file() and text in p.read_bytes()]


async def _rollout_page(record: Path, rid: str) -> str:
    """The dashboard's page of one rollout, from a real `ViewServer`."""
    async with ViewServer([record]) as view:
        url = f"{view.url}b/{record.name}/r/{rid}"
        with await asyncio.to_thread(urllib.request.urlopen, url, timeout=60) as response:
            return str(response.read().decode())


async def test_a_customer_a_model_plays(tmp_path: Path) -> None:
    async with FakeModelServer(_user_policy()) as fake:
        env = {**os.environ, "SUPPORT_MODEL_USER": "1", "OPENAI_API_KEY": USER_KEY}
        flag = ["--user-model", f"openai/gpt-4.1-mini@{fake.url}"]
        scripted, played = await _proctor_run(tmp_path, *flag, env=env)
        user_calls = [r for r in fake.requests if r.api == "chat"]
    _check(scripted, "4417")
    _check(played, "5120")
    turns = [s for s in played["trace"]["steps"] if s["kind"] == "model_turn"]
    users = [t for t in turns if (t["data"] or {}).get("user")]
    assert len(users) == 3 and {t["data"]["model"] for t in users} == {"gpt-4.1-mini"}
    assert len(turns) > 3  # the agent's own turns, unmarked
    assert played["cost"] > 0 and not scripted["cost"]  # its turns, priced on its run
    assert played["grade"]["info"]["metrics"]["customer_messages"] == 3.0
    assert all(r.headers.get("authorization") == f"Bearer {USER_KEY}" for r in user_calls)
    assert _holding(tmp_path, USER_KEY.encode()) == []  # the key stayed in the proxy
    traces = _holding(tmp_path / "record" / "rollouts", b"5120")
    [rid] = [p.parent.name for p in traces if p.name == "trace.jsonl"]
    page = await _rollout_page(tmp_path / "record", rid)
    shown = re.search(r'id="dialogue">(.*?)data-kind="answer"', page, re.S)
    assert shown is not None and "My order 5120 arrived broken." in shown[1]
    agent_turns = len(turns) - len(users)  # the user model's turns are not the agent's
    assert page.count('class="item turn"') == agent_turns, page[-3000:]
    assert _dialogue_steps(played)[1] == ("user", "My order 5120 arrived broken.")
    assert len(user_calls) == 3  # two replies, then the model ends the dialogue
    system = user_calls[0].messages[0]
    assert system["role"] == "system" and "order 5120" in system["content"]
    assert user_calls[-1].messages[1] == {"role": "assistant", "content": OPENING}
