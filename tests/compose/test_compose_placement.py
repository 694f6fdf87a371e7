"""A harness placed in a Compose project's `main` service: it reaches the `db` service by
name and its model only through the relay, and holds no provider key; through
`rollout()` and as a batch (`kind = "compose"`)."""

from __future__ import annotations

import asyncio
import json
import re
import subprocess
import sys
import urllib.request
from pathlib import Path
from typing import Any

import pytest

from proctor import rollout
from proctor.agents import CommandAgent
from proctor.batch import aexecute, list_rollouts
from proctor.proxy import InterceptionProxy, Upstream
from proctor.runtimes import ComposeRuntime
from proctor.testing import FakeModelServer, FakeRequest, Reply
from proctor.view import ViewServer

EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "compose"
HARNESS = EXAMPLE / "harness.py"
SENTINEL = "sk-proj-FAKE55composesentinel"
pytestmark = [pytest.mark.slow, pytest.mark.timeout(300)]

# Inside `main`: the database by name, the model through `$OPENAI_BASE_URL`, and what it
# can find of the driver's key or of the proxy itself. The answer goes to stdout, the
# report to stderr (the trace keeps both).
_PROBE = r"""
import json, os, re, socket, sys, urllib.request
prompt = sys.stdin.read()
item = re.search(r"of '([^']*)'", prompt)[1]
stock = urllib.request.urlopen(f"http://db:8080/stock/{item}", timeout=10).read().decode()
req = urllib.request.Request(os.environ["OPENAI_BASE_URL"] + "/chat/completions",
    data=json.dumps({"model": "m", "messages": [
        {"role": "user", "content": f"{prompt}\nThe db service reports a stock of {stock}."}]}
    ).encode(),
    headers={"Authorization": "Bearer " + os.environ["OPENAI_API_KEY"],
             "Content-Type": "application/json"})
answer = json.load(urllib.request.urlopen(req, timeout=60))["choices"][0]["message"]["content"]
blobs = []
for pid in filter(str.isdigit, os.listdir("/proc")):
    for name in ("environ", "cmdline"):
        try:
            blobs.append(open(f"/proc/{pid}/{name}", "rb").read())
        except OSError:
            pass
try:
    socket.create_connection(("127.0.0.1", int(os.environ["PROXY_PORT"])), timeout=3).close()
    proxy = "reached"
except OSError:
    proxy = "unreachable"
print(answer)
sys.stderr.write(json.dumps({
    "stock": stock,
    "leak": any(b"FAKE" + b"55" in blob for blob in blobs),  # not in its own argv
    "key": os.environ["OPENAI_API_KEY"],
    "url": os.environ["OPENAI_BASE_URL"],
    "proxy": proxy,
    "keys": {k: v for k, v in os.environ.items() if k.endswith("_API_KEY")},
}))
"""


def _clerk(request: FakeRequest) -> Reply:
    """The model: the stock after the delivery, if the harness told it the database's."""
    text = request.messages[-1]["content"]
    found = re.search(r"A delivery of (\d+) arrived.*reports a stock of (\d+)", text, re.S)
    return Reply(str(int(found[1]) + int(found[2])) if found else "no stock given")


def _labelled(kind: str, batch: str) -> list[str]:
    argv = ["podman", *kind.split(), "-q", f"--filter=label=proctor.batch={batch}"]
    return subprocess.run(argv, capture_output=True, text=True, check=True).stdout.split()


@pytest.fixture
def example(monkeypatch: pytest.MonkeyPatch) -> Any:
    monkeypatch.syspath_prepend(str(EXAMPLE))
    import tasks

    yield tasks
    for name in ("tasks", "env"):
        sys.modules.pop(name, None)


async def test_a_placed_harness_reaches_the_db_by_name_and_its_model_only_through_the_relay(
    image: str, options: dict[str, Any], example: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("OPENAI_API_KEY", SENTINEL)  # the driver's: it must stay out
    monkeypatch.setenv("PROCTOR_LEAK_CHECK", SENTINEL)
    runtime = ComposeRuntime(
        EXAMPLE / "compose.yaml", "/app/env.py", variables={"PROCTOR_IMAGE": image}, **options
    )
    row = next(iter(example.tasks))  # apples: 12 in the database, 30 delivered
    async with (
        FakeModelServer(_clerk) as fake,
        InterceptionProxy(Upstream(fake.url)) as proxy,
        runtime,
    ):
        port = proxy.base_url.rsplit(":", 1)[1].split("/")[0]
        probe = CommandAgent(
            ["{python}", "-c", _PROBE], placement="substrate", env={"PROXY_PORT": port}
        )
        run = await rollout(row, probe, runtime=runtime, proxy=proxy)
        proxy_url = proxy.base_url
    assert run.status == "completed", run.error
    assert (run.answer, run.reward) == ("42", 1.0)
    (request,) = fake.requests  # the one model turn, relayed and recorded
    assert "reports a stock of 12" in request.messages[-1]["content"]
    assert [s.kind for s in run.trace.steps].count("model_turn") == 1
    (step,) = [s for s in run.trace.steps if s.kind == "assistant"]
    assert step.data is not None
    seen = json.loads(step.data["stderr"])
    assert seen["stock"] == "12"  # the db service, by its name
    assert seen["leak"] is False and seen["key"] != SENTINEL and seen["key"]
    assert set(seen["keys"].values()) == {seen["key"]}  # the session's secret, nothing else
    assert seen["url"].startswith("http://127.0.0.1:") and seen["url"] != proxy_url
    assert seen["proxy"] == "unreachable"  # the relay's loopback port is the only way
    assert _labelled("ps -a", runtime.batch) == [] and _labelled("network ls", runtime.batch) == []


async def test_a_batch_places_the_example_harness_in_each_project_s_main(
    tmp_path: Path, image: str, options: dict[str, Any]
) -> None:
    async with FakeModelServer(_clerk, models=("gpt-4.1-mini",)) as fake:
        config = {
            "taskset": {
                "source": str(EXAMPLE / "tasks.py"),
                "env_source": str(EXAMPLE / "env.py"),
            },
            "agents": [
                {
                    "kind": "command",
                    "name": "placed",
                    "argv": ["{python}", str(HARNESS)],
                    "model": f"openai/gpt-4.1-mini@{fake.url}",
                    "placement": "substrate",
                    "ship": [str(HARNESS)],
                    "needs": {"api": "openai-chat"},
                }
            ],
            "runtime": {
                "kind": "compose",
                "file": str(EXAMPLE / "compose.yaml"),
                "source": "/app/env.py",
                "variables": {"PROCTOR_IMAGE": image},
                **options,
            },
            "max_concurrent": 3,
            "expected_rollouts": 3,
            "timeouts": {"rollout": 200},
        }
        path = tmp_path / "batch.json"
        path.write_text(json.dumps(config))
        result = await aexecute(path, tmp_path / "out")
    assert result.counts == {"completed": 3}, result.plan and result.plan.to_json()
    rows = list_rollouts(tmp_path / "out", limit=None)
    assert sorted(r["reward"] for r in rows) == [1.0] * 3
    assert len(fake.requests) == 3
    said = [r.messages[-1]["content"] for r in fake.requests]
    assert all("The db service reports a stock of" in text for text in said)
    assert result.batch_id is not None and _labelled("ps -a", result.batch_id) == []
    # the dashboard shows a rollout's model turn; each rollout exports as a sample
    rid = str(rows[0]["id"])
    async with ViewServer([tmp_path / "out"]) as view:
        url = f"{view.url}b/out/r/{rid}"
        with await asyncio.to_thread(urllib.request.urlopen, url, timeout=30) as page:
            assert "The db service reports a stock of" in page.read().decode()
    export = [sys.executable, "-m", "proctor.cli", "export", str(tmp_path / "out")]
    proc = await asyncio.create_subprocess_exec(*export, stdout=asyncio.subprocess.PIPE)
    exported, _ = await proc.communicate()
    assert proc.returncode == 0
    samples = [json.loads(line) for line in exported.splitlines()]
    assert sorted(sample["reward"] for sample in samples) == [1.0] * 3
