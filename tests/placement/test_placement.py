"""`CommandAgent(placement="substrate")`: the harness runs inside the rollout's sandbox or
container, its model calls relayed to the driver's proxy through the entry's pipes."""

from __future__ import annotations

import asyncio
import importlib.util
import os
import re
import shutil
import subprocess
from collections.abc import Iterator
from pathlib import Path
from types import ModuleType

import pytest

from proctor import rollout
from proctor.agents import CommandAgent
from proctor.importers import HarborRuntime, harbor_tasks
from proctor.proxy import InterceptionProxy, Upstream
from proctor.runtimes import ContainerRuntime, LocalRuntime, SandboxRuntime, python_image
from proctor.testing import FakeModelServer, Reply

EXAMPLE = Path(__file__).parents[2] / "examples" / "placement"
HARNESS = EXAMPLE / "harness.py"
RUNC = "/usr/sbin/runc"  # crun fails on these hosts' cgroups (as in tests/importers)
OCI_RUNTIME = RUNC if os.path.exists(RUNC) else None
HARBOR_IMAGES = ("localhost/proctor-harbor-task", "localhost/proctor-harbor")
SENTINEL = "sk-proj-FAKE99placementsentinel"

needs_bwrap = pytest.mark.skipif(shutil.which("bwrap") is None, reason="needs bubblewrap")


def _example() -> ModuleType:
    spec = importlib.util.spec_from_file_location("placement_env", EXAMPLE / "env.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _replies() -> list[Reply]:
    return [Reply('{"path": "notes.txt", "content": "hello world\\n"}'), Reply("done")]


def _harness() -> CommandAgent:
    return CommandAgent(["{python}", str(HARNESS)], placement="substrate", ship=[HARNESS])


@needs_bwrap
async def test_a_harness_in_a_sandbox_fixes_the_file_the_task_gave_it() -> None:
    env = _example()
    async with (
        FakeModelServer(_replies()) as fake,
        InterceptionProxy(Upstream(fake.url)) as proxy,
        SandboxRuntime(EXAMPLE / "env.py") as runtime,
    ):
        run = await rollout(env.fix_typo(), _harness(), runtime=runtime, proxy=proxy)
    assert run.status == "completed", run.error
    assert run.reward == 1.0
    assert run.answer == "done"
    assert [s.kind for s in run.trace.steps].count("model_turn") == 2


# Inside the substrate: what the harness sees of the driver, its model endpoint and
# where it runs. It prints one JSON object.
_PROBE = r"""
import json, os, sys, urllib.request
found = []
for pid in os.listdir("/proc"):
    if pid.isdigit():
        try:
            found.append(open(f"/proc/{pid}/environ", "rb").read())
        except OSError:
            pass
url = os.environ["OPENAI_BASE_URL"]
req = urllib.request.Request(url + "/chat/completions", data=json.dumps(
    {"model": "m", "messages": [{"role": "user", "content": "hi"}]}).encode(),
    headers={"Authorization": "Bearer " + os.environ["OPENAI_API_KEY"],
             "Content-Type": "application/json"})
reply = json.load(urllib.request.urlopen(req, timeout=30))
print(json.dumps({
    "leak": any(b"FAKE99" in blob for blob in found),
    "key": os.environ["OPENAI_API_KEY"],
    "url": url,
    "cwd": os.getcwd(),
    "uid": os.getuid(),
    "reply": reply["choices"][0]["message"]["content"],
    "caps": sorted(json.loads(os.environ["PROCTOR_CAPABILITIES"])),
    "task_file": os.path.exists("/tmp/workspace/notes.txt"),
}))
"""


@needs_bwrap
async def test_the_sandboxed_harness_gets_a_session_secret_and_a_loopback_of_its_own(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("OPENAI_API_KEY", SENTINEL)
    monkeypatch.setenv("PROCTOR_LEAK_CHECK", SENTINEL)
    env = _example()
    probe = CommandAgent(["{python}", "-c", _PROBE], placement="substrate", answer="json")
    async with (
        FakeModelServer(lambda _: Reply("hello")) as fake,
        InterceptionProxy(Upstream(fake.url)) as proxy,
        SandboxRuntime(EXAMPLE / "env.py") as runtime,
    ):
        run = await rollout(env.fix_typo(), probe, runtime=runtime, proxy=proxy)
        proxy_url = proxy.base_url
    assert run.status == "completed", run.error
    seen = run.answer
    assert seen["leak"] is False
    assert seen["key"] != SENTINEL and seen["key"]
    assert seen["url"].startswith("http://127.0.0.1:") and seen["url"] != proxy_url
    assert seen["reply"] == "hello"
    assert seen["cwd"] == "/sandbox" and seen["task_file"] is True
    assert seen["uid"] == 65534
    assert seen["caps"] == ["shell"]


async def test_a_runtime_that_cannot_host_the_harness_fails_the_rollout_saying_so() -> None:
    env = _example()
    run = await rollout(env.fix_typo(), _harness(), runtime=LocalRuntime(env.env))
    assert run.status == "failed"
    assert run.error is not None and run.error.phase == "agent"
    assert "cannot host a harness" in run.error.message
    assert "placement='jail'" in run.error.message


async def test_a_harness_needing_a_capability_the_environment_lacks_is_not_started() -> None:
    env = _example()
    agent = CommandAgent(["true"], needs={"capabilities": ["shell", "browser"]})
    run = await rollout(env.fix_typo(), agent, runtime=LocalRuntime(env.env))
    assert run.status == "failed" and run.error is not None
    assert run.error.message == (
        "the harness needs capabilities browser; the environment declares shell"
    )


def test_a_placement_is_jail_or_substrate_and_ship_needs_the_substrate() -> None:
    with pytest.raises(ValueError, match="placement must be"):
        CommandAgent(["x"], placement="box")  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="only with placement='substrate'"):
        CommandAgent(["x"], ship=[HARNESS])
    with pytest.raises(ValueError, match="is not a file"):
        CommandAgent(["x"], placement="substrate", ship=[EXAMPLE])


@pytest.fixture(scope="module")
def image() -> str:
    if shutil.which("podman") is None:
        pytest.skip("needs podman")
    return python_image(engine="podman", paths=[EXAMPLE])


async def test_a_harness_in_a_container_fixes_the_file_the_task_gave_it(image: str) -> None:
    env = _example()
    containers = ContainerRuntime(image, source=str(EXAMPLE / "env.py"), engine="podman")
    async with (
        FakeModelServer(_replies()) as fake,
        InterceptionProxy(Upstream(fake.url)) as proxy,
        containers,
    ):
        run = await rollout(env.fix_typo(), _harness(), runtime=containers, proxy=proxy)
    assert run.status == "completed", run.error
    assert run.reward == 1.0
    assert run.answer == "done"


_PARALLEL = r"""
import json, os, threading, urllib.request
def call(i, out):
    body = {"model": "m", "messages": [{"role": "user", "content": str(i) * 300_000}]}
    req = urllib.request.Request(os.environ["OPENAI_BASE_URL"] + "/chat/completions",
        data=json.dumps(body).encode(),
        headers={"Authorization": "Bearer " + os.environ["OPENAI_API_KEY"],
                 "Content-Type": "application/json"})
    out[i] = json.load(urllib.request.urlopen(req, timeout=60))["choices"][0]["message"]["content"]
out = {}
threads = [threading.Thread(target=call, args=(i, out)) for i in range(6)]
for t in threads: t.start()
for t in threads: t.join()
print(json.dumps(sorted(out.values())))
"""


@needs_bwrap
async def test_the_relay_carries_parallel_connections_and_large_requests() -> None:
    env = _example()
    agent = CommandAgent(["{python}", "-c", _PARALLEL], placement="substrate", answer="json")
    async with (
        FakeModelServer(lambda _: Reply("ok")) as fake,
        InterceptionProxy(Upstream(fake.url)) as proxy,
        SandboxRuntime(EXAMPLE / "env.py") as runtime,
    ):
        run = await rollout(env.fix_typo(), agent, runtime=runtime, proxy=proxy)
    assert run.status == "completed", run.error
    assert run.answer == ["ok"] * 6
    assert sorted(len(r.messages[0]["content"]) for r in fake.requests) == [300_000] * 6


@needs_bwrap
async def test_a_placed_harness_past_its_deadline_is_stopped_and_the_rollout_fails() -> None:
    env = _example()
    sleeper = CommandAgent(
        ["{python}", "-c", "import time; time.sleep(600)"], placement="substrate", kill_grace=0.5
    )
    async with SandboxRuntime(EXAMPLE / "env.py") as runtime:
        run = await asyncio.wait_for(
            rollout(env.fix_typo(), sleeper, runtime=runtime, timeout=3), 120
        )
    assert run.status == "failed"
    assert run.error is not None and run.error.phase == "agent"


def _libraries(binary: str) -> list[str]:
    out = subprocess.run(["ldd", binary], capture_output=True, text=True, check=True).stdout
    return [part for line in out.splitlines() for part in line.split() if part.startswith("/")]


def _images() -> set[str]:
    found: set[str] = set()
    for repository in HARBOR_IMAGES:
        argv = ["podman", "images", "-q", "--filter", f"reference={repository}"]
        found |= set(subprocess.run(argv, capture_output=True, text=True).stdout.split())
    return found


@pytest.fixture
def harbor_images() -> Iterator[None]:
    """Podman, and the Harbor task images the test builds removed after it (each
    proctor source edit makes new ones)."""
    if shutil.which("podman") is None:
        pytest.skip("needs podman")
    before = _images()
    yield
    if made := _images() - before:
        subprocess.run(["podman", "rmi", "-f", *made], capture_output=True, check=False)


@pytest.mark.usefixtures("harbor_images")
async def test_a_harness_in_a_harbor_task_s_own_container_solves_it(tmp_path: Path) -> None:
    bash = shutil.which("bash")
    assert bash is not None
    base = await asyncio.to_thread(
        python_image,
        engine="podman",
        distributions=(),
        paths=[bash, *_libraries(bash)],
        repository="localhost/proctor-harbor-test-base",  # the importer tests' base too
    )
    task = shutil.copytree(EXAMPLE / "harbor-task", tmp_path / "harbor-task")
    dockerfile = task / "environment" / "Dockerfile"
    dockerfile.write_text(re.sub(r"(?m)^FROM .*$", f"FROM {base}", dockerfile.read_text()))
    (row,) = harbor_tasks(task)
    async with (
        FakeModelServer(_replies()) as fake,
        InterceptionProxy(Upstream(fake.url)) as proxy,
        HarborRuntime(engine="podman", oci_runtime=OCI_RUNTIME) as runtime,
    ):
        run = await rollout(row, _harness(), runtime=runtime, proxy=proxy)
    assert run.status == "completed", run.error
    assert run.reward == 1.0  # Harbor's own tests/test.sh, in the container
    assert run.answer == "done"


_SEQUENTIAL = r"""
import json, os, urllib.request
answers = set()
for i in range(270):  # a fresh connection each: more than the relay holds at once
    req = urllib.request.Request(os.environ["OPENAI_BASE_URL"] + "/chat/completions",
        data=json.dumps({"model": "m", "messages": [{"role": "user", "content": "hi"}]}).encode(),
        headers={"Authorization": "Bearer " + os.environ["OPENAI_API_KEY"],
                 "Content-Type": "application/json"})
    with urllib.request.urlopen(req, timeout=60) as response:
        answers.add(json.load(response)["choices"][0]["message"]["content"])
print(json.dumps(sorted(answers)))
"""


@needs_bwrap
async def test_connections_the_harness_closed_are_released() -> None:
    env = _example()
    agent = CommandAgent(["{python}", "-c", _SEQUENTIAL], placement="substrate", answer="json")
    async with (
        FakeModelServer(lambda _: Reply("ok")) as fake,
        InterceptionProxy(Upstream(fake.url)) as proxy,
        SandboxRuntime(EXAMPLE / "env.py") as runtime,
    ):
        run = await rollout(env.fix_typo(), agent, runtime=runtime, proxy=proxy)
    assert run.status == "completed", run.error
    assert run.answer == ["ok"]
    assert len(fake.requests) == 270
