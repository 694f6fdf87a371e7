"""A batch config's `computer` agent entry: `ComputerAgent` with its options, through
`proctor batch` and the interception proxy, on the `form` example's desktop task, with
the fake model playing the example's scripted policy."""

from __future__ import annotations

import asyncio
import base64
import hashlib
import importlib.util
import json
import os
import sys
from pathlib import Path
from typing import Any

from proctor.batch import list_rollouts
from proctor.store import read_record
from proctor.testing import FakeModelServer, FakeRequest, Reply

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
    records = {row["agent"]: read_record(out, row["id"]) for row in rows}
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


# -- a killed runner's computer rollout continues with the frames it had ---------------

TOKEN = "form-resume-server-token-0123456789"
FILL_THEN_WAIT = {"type": "wait", "ms": 5000}  # the runner is killed while this runs


async def _serve_form(env: dict[str, str]) -> tuple[asyncio.subprocess.Process, str]:
    """`proctor serve` of the form environment (it parks a session whose runner died)."""
    proc = await asyncio.create_subprocess_exec(
        *(sys.executable, "-m", "proctor.cli", "serve", str(FORM / "env.py")),
        *("--token-env", "FORM_TOKEN"),
        stdout=asyncio.subprocess.PIPE,
        env=env,
    )
    assert proc.stdout is not None
    async with asyncio.timeout(60):
        while line := (await proc.stdout.readline()).decode():
            if line.startswith("PROCTOR_SERVE_PORT="):
                return proc, f"tcp://127.0.0.1:{line.strip().split('=', 1)[1]}"
    proc.kill()
    raise AssertionError("proctor serve printed no port")


def _image_digests(request: FakeRequest) -> list[str]:
    """The SHA-256 of every inline image the request carried, in order."""
    found: list[str] = []

    def walk(value: Any) -> None:
        if isinstance(value, dict):
            for item in value.values():
                walk(item)
        elif isinstance(value, list):
            for item in value:
                walk(item)
        elif isinstance(value, str) and value.startswith("data:image/"):
            data = base64.b64decode(value.split(";base64,", 1)[1])
            found.append(hashlib.sha256(data).hexdigest())

    walk(request.json)
    return found


async def _until(check: Any, within: float = 60.0) -> Any:
    """`check()` once it is truthy (a file another process writes: polled)."""
    async with asyncio.timeout(within):
        while True:
            if found := check():
                return found
            await asyncio.sleep(0.05)


def _pending_checkpoint(out: Path) -> Path | None:
    for path in out.glob("rollouts/*/checkpoint.json"):
        try:
            if json.loads(path.read_text()).get("pending"):
                return path
        except ValueError:
            continue
    return None


async def test_a_resumed_computer_rollout_continues_with_its_frames(tmp_path: Path) -> None:
    fill = _form_policy()

    def policy(request: FakeRequest) -> Reply:  # the form's batch and a long wait; done
        reply = fill(request)
        if any(m["role"] == "tool" for m in request.messages):
            return reply
        return Reply.actions(*reply.tool_calls[0].arguments["actions"], FILL_THEN_WAIT)

    env = {**os.environ, "FORM_TOKEN": TOKEN}
    server, url = await _serve_form(env)
    started = [server]
    out = tmp_path / "out"
    try:
        async with FakeModelServer(policy, models=("gpt-4.1",)) as fake:
            config = tmp_path / "form.toml"
            config.write_text(
                'name = "form"\nmax_concurrent = 1\nexpected_rollouts = 1\n'
                f'[taskset]\nsource = "{FORM / "tasks.py"}"\nlimit = 1\n'
                f'[runtime]\nkind = "url"\nurl = "{url}"\ntoken_env = "FORM_TOKEN"\n'
                "[timeouts]\nrollout = 120\n"
                f'[[agents]]\nkind = "computer"\nmodel = "openai/gpt-4.1@{fake.url}"\n'
            )
            runner = await asyncio.create_subprocess_exec(
                *(sys.executable, "-m", "proctor.cli", "batch", str(config), "--execute"),
                *("--output-dir", str(out), "--quiet"),
                stdout=asyncio.subprocess.DEVNULL,
                env=env,
            )
            started.append(runner)
            await _until(lambda: _pending_checkpoint(out))
            runner.kill()  # SIGKILL while the batch of the first turn runs
            await runner.wait()
            before = len(fake.requests)
            frames_dir = out / "computer-frames"
            assert [p.name for p in frames_dir.iterdir()]  # the frames survived the kill
            resume = await asyncio.create_subprocess_exec(
                *(sys.executable, "-m", "proctor.cli", "batch", "--resume", str(out), "--quiet"),
                stdout=asyncio.subprocess.DEVNULL,
                stderr=asyncio.subprocess.PIPE,
                env=env,
            )
            started.append(resume)
            _, stderr = await asyncio.wait_for(resume.communicate(), 180)
            assert resume.returncode == 0, stderr.decode()
    finally:
        server.terminate()
        for proc in started:  # a runner too, if the test failed before it ended
            if proc.returncode is None and proc is not server:
                proc.kill()
            await proc.wait()
    (row,) = list_rollouts(out)
    assert row["status"] == "completed" and row["reward"] == 1.0, row
    assert before == 1 and len(fake.requests) == 2  # no model turn sent twice
    first, resumed = fake.requests
    # the resumed turn carries the frame the model saw before, read back from its file,
    # and the screen after the interrupted batch
    (opening,) = _image_digests(first)
    assert _image_digests(resumed)[0] == opening and len(_image_digests(resumed)) == 2
    assert "Interrupted by a restart" in json.dumps(resumed.json)
    assert list(frames_dir.iterdir()) == []  # removed once the rollout ended
