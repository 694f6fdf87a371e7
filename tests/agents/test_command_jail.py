"""`CommandAgent`'s jail: an allowlisted environment, another uid, its own namespaces."""

from __future__ import annotations

import asyncio
import json
import os
import shutil
import sys
import tempfile
from pathlib import Path

import pytest

from proctor import Environment, rollout
from proctor._tempdirs import owner
from proctor._uids import HOST_UIDS
from proctor.agents import CommandAgent
from proctor.agents._jail import _MAX_CONNS
from proctor.proxy import InterceptionProxy, Upstream
from proctor.testing import FakeModelServer, Reply

HERE = Path(__file__).parent
JAIL_UID = 65534  # inside an unprivileged user namespace
HOME_DIR = os.path.expanduser("~")

# Fake secrets in the driver's environment; each holds a marker the scan looks for.
SECRETS = {
    "OPENAI_API_KEY": "sk-proj-FAKE01openai",
    "AWS_SECRET_ACCESS_KEY": "wJalrXUtnFEMI/FAKE02aws",
    "HF_TOKEN": "hf_FAKE03huggingface",
    "MY_SERVICE_PW": "FAKE04servicepw",
    "DATABASE_URL": "postgres://app:FAKE05dbpassword@db.internal:5432/app",
    "MYSQL_PWD": "FAKE06mysql",
    "SENTRY_DSN": "https://FAKE07sentry@o1.ingest.sentry.io/1",
    "GH_PAT": "ghp_FAKE08github",
    "REDIS_URL": "redis://:FAKE09redis@cache:6379/0",
    "PASSPHRASE": "FAKE10passphrase",
    "SSH_PRIVATE": "-----BEGIN OPENSSH PRIVATE KEY-----\nFAKE11ssh\n-----END",
    "BUILD_FLAVOR": "sk-ant-api03-FAKE12innocent",  # an innocent name holding a key
}
MARKERS = [f"FAKE{i:02d}" for i in range(1, 13)]

env = Environment("jail-env")


@env.template
async def say(word: str):
    answer = yield f"say {word}"
    yield 1.0 if word in str(answer) else 0.0


async def test_harness_finds_none_of_the_drivers_secrets(tmp_path: Path) -> None:
    out = tmp_path / "out"
    out.mkdir()
    out.chmod(0o777)
    proc = await asyncio.create_subprocess_exec(
        sys.executable,
        str(HERE / "jail_driver.py"),
        str(out),
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
        env={**os.environ, **SECRETS},  # the child driver's, not this process's
    )
    try:
        stdout, stderr = await asyncio.wait_for(proc.communicate(), 60)
    finally:
        if proc.returncode is None:
            proc.kill()
            await proc.wait()
    assert proc.returncode == 0, stderr.decode()
    outcome = json.loads(stdout)
    # The harness still works: a model turn through the proxy, an answer that is graded.
    assert outcome["error"] is None, outcome["error"]
    assert outcome["turns"] == 1 and outcome["reward"] == 1.0
    assert outcome["upstream_keys"] == ["Bearer " + SECRETS["OPENAI_API_KEY"]]
    dump = out / "seen.json"
    seen = json.loads(dump.read_text())
    text = dump.read_text() + json.dumps(outcome["answer"])
    assert [m for m in MARKERS if m in text] == []
    assert seen["env"]["OPENAI_API_KEY"].startswith("sk-proctor-")
    # It looked: its own environment and /proc entries were readable.
    assert any(p["environ"] and "sk-proctor-" in p["environ"] for p in seen["procs"].values())
    # Another uid on the host: as root a fresh one of its own (not nobody, whom other
    # processes share), else the driver's uid behind a user namespace.
    if os.geteuid() == 0:
        assert dump.stat().st_uid in HOST_UIDS and seen["uid"] == dump.stat().st_uid
    else:
        assert dump.stat().st_uid == os.geteuid() and seen["uid"] == JAIL_UID
    # Its own pid namespace: a handful of processes, none of them the driver.
    assert len(seen["procs"]) <= 4
    assert not any("jail_driver" in (p["cmdline"] or "") for p in seen["procs"].values())
    assert seen["driver"] is None or "FAKE" not in seen["driver"]
    # It writes only to its own HOME (and `writable`): not the forwarding sockets' folder.
    home = seen["env"]["HOME"]
    assert [d for d, ok in seen["writable"].items() if ok] == [home]
    # Capabilities reach it through the jail: a TCP one and a Unix-socket one.
    assert seen["capabilities"]["echo"] == "echo:ping\n"
    shell = seen["capabilities"]["shell"]
    assert shell["exit_code"] == 0 and shell["stdout"] == "shell-says-hi\n"


def test_environment_is_an_allowlist_extended_by_name(monkeypatch: pytest.MonkeyPatch) -> None:
    from proctor import Task
    from proctor.agents import Run

    for name, value in SECRETS.items():
        monkeypatch.setenv(name, value)
    monkeypatch.setenv("MY_SETTING", "on")
    run = Run(Task(env="jail-env", id="t"))
    passed = CommandAgent(["true"]).environ(run)
    assert not set(SECRETS) & set(passed) and "MY_SETTING" not in passed
    assert {"PATH", "HOME", "TMPDIR", "PROCTOR_TASK_ID", "PROCTOR_CAPABILITIES"} <= set(passed)
    extended = CommandAgent(["true"], pass_env=["MY_SETTING"], env={"X": "1"}).environ(run)
    assert extended["MY_SETTING"] == "on" and extended["X"] == "1"


def test_addresses_the_jail_forwards() -> None:
    from proctor._urls import http_unix_url
    from proctor.agents._jail import Routes

    routes = Routes()
    mcp = http_unix_url("/tmp/proctor-fwd-x/1.sock", "/mcp")
    assert routes.url(mcp) == http_unix_url("/run/proctor/u0.sock", "/mcp")
    assert routes.url("unix:///tmp/proctor-fwd-x/0.sock") == "unix:///run/proctor/u1.sock"
    assert routes.url("http://127.0.0.1:4000/v1") == "http://127.0.0.1:4000/v1"
    assert routes.url("http://localhost:4000") == "http://localhost:4000"  # one listener
    assert routes.url("https://api.example.com/v1") == "https://api.example.com/v1"  # none
    targets = sorted((f.target, f.port) for f in routes.forwards.values())
    assert targets == [
        ("/tmp/proctor-fwd-x/0.sock", None),
        ("/tmp/proctor-fwd-x/1.sock", None),
        ("127.0.0.1:4000", 4000),
    ]


async def test_without_bwrap_the_run_fails_naming_the_fix(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("PATH", str(tmp_path))  # no bwrap there
    run = await rollout(say(word="x"), CommandAgent([sys.executable, "-c", "print('x')"]))
    assert run.error is not None and run.error.phase == "agent"
    assert "apt-get install bubblewrap" in run.error.message
    assert "jail=False" in run.error.message
    unjailed = CommandAgent([sys.executable, "-c", "print('x')"], jail=False)
    assert (await rollout(say(word="x"), unjailed)).reward == 1.0


async def test_a_working_directory_the_jail_should_not_show_fails_the_run(tmp_path: Path) -> None:
    run = await rollout(say(word="x"), CommandAgent(["true"], cwd=HOME_DIR))
    assert run.error is not None and "home folder" in run.error.message
    run = await rollout(say(word="x"), CommandAgent(["true"], cwd=tmp_path / "missing"))
    assert run.error is not None and "jail could not start: bwrap:" in run.error.message


async def test_folders_of_a_killed_driver_are_removed_by_the_next_start() -> None:
    dead = await asyncio.create_subprocess_exec("true")
    await dead.wait()
    stale = Path(tempfile.gettempdir(), f"proctor-jail-{dead.pid}-123-stale")
    live = Path(tempfile.gettempdir(), f"proctor-jail-{owner(os.getpid())}-live")
    try:
        for folder in (stale, live):
            (folder / "s").mkdir(parents=True)
        run = await rollout(say(word="x"), CommandAgent(["echo", "x"]))
        assert run.reward == 1.0
        left = os.listdir(tempfile.gettempdir())
        assert stale.name not in left and live.name in left
    finally:
        shutil.rmtree(stale, ignore_errors=True)
        shutil.rmtree(live, ignore_errors=True)


FILL = """
import os
def fill(folder):
    try:
        with open(os.path.join(folder, "big"), "wb") as file:
            file.write(bytes(3 << 20))
        return "wrote"
    except OSError as exc:
        return exc.strerror
print([fill(folder) for folder in (os.environ["HOME"], "/tmp", "/dev/shm")])
"""


async def test_the_jails_memory_folders_are_capped() -> None:
    capped = CommandAgent([sys.executable, "-c", FILL], tmpfs_size=1 << 20)
    assert (await rollout(say(word="x"), capped)).answer == str(["No space left on device"] * 3)
    roomy = CommandAgent([sys.executable, "-c", FILL], tmpfs_size=None)
    assert (await rollout(say(word="x"), roomy)).answer == str(["wrote"] * 3)


STREAM = """
import json, os, sys, time, urllib.request
body = {"model": "m", "stream": True, "messages": [{"role": "user", "content": "hi"}]}
request = urllib.request.Request(
    os.environ["OPENAI_BASE_URL"] + "/chat/completions", data=json.dumps(body).encode(),
    headers={"Authorization": "Bearer " + os.environ["OPENAI_API_KEY"],
             "Content-Type": "application/json"},
)
events = urllib.request.urlopen(request)
arrivals = [time.monotonic() for line in events if line.startswith(b"data: {")]
print(json.dumps({"events": len(arrivals), "spread": arrivals[-1] - arrivals[0]}))
"""


async def test_a_stream_reaches_the_jailed_harness_event_by_event() -> None:
    reply = Reply("one two three four five", chunks=5, chunk_delay=0.15)
    agent = CommandAgent([sys.executable, "-c", STREAM], answer="json")
    async with (
        FakeModelServer(lambda _: reply) as fake,
        InterceptionProxy(Upstream(fake.url)) as proxy,
    ):
        run = await rollout(say(word="events"), agent, proxy=proxy)
    assert run.answer["events"] >= 5
    assert run.answer["spread"] > 0.4  # not buffered until the end by either relay


FLOODING = 700  # connections the harness holds open at once

FLOOD = f"""
import os, socket, time
from urllib.parse import urlsplit
port = urlsplit(os.environ["OPENAI_BASE_URL"]).port
held = [socket.create_connection(("127.0.0.1", port)) for _ in range({FLOODING})]
time.sleep(1.5)
print("done")
"""


async def test_a_connection_flood_from_the_jail_is_capped_in_the_driver() -> None:
    fds = len(os.listdir("/proc/self/fd"))
    peak = fds

    async def watch() -> None:
        nonlocal peak
        while True:
            peak = max(peak, len(os.listdir("/proc/self/fd")))
            await asyncio.sleep(0.02)

    async with FakeModelServer() as fake, InterceptionProxy(Upstream(fake.url)) as proxy:
        watcher = asyncio.create_task(watch())
        try:
            run = await rollout(
                say(word="done"), CommandAgent([sys.executable, "-c", FLOOD]), proxy=proxy
            )
        finally:
            watcher.cancel()
    assert run.reward == 1.0, run.error
    # Each relayed connection holds 3 fds here (jail side, proxy both); a refused one is
    # accepted and closed at once, but under load several may be open at the same moment:
    # at most all of them. Uncapped, the flood would hold 3 * FLOODING.
    assert peak - fds <= 3 * _MAX_CONNS + (FLOODING - _MAX_CONNS) + 40


def marked(marker: str) -> list[int]:
    """Host pids whose command line holds `marker`."""
    found = []
    for pid in filter(str.isdigit, os.listdir("/proc")):
        try:
            cmdline = Path(f"/proc/{pid}/cmdline").read_bytes()
        except OSError:
            continue
        if marker.encode() in cmdline:
            found.append(int(pid))
    return found


async def gone(marker: str) -> bool:
    for _ in range(100):  # the jail's pid namespace ends within moments
        if not marked(marker):
            return True
        await asyncio.sleep(0.05)
    return False


async def test_nothing_of_the_jail_outlives_its_rollout() -> None:
    marker = f"{os.getpid() % 1000 + 7000}.5"  # sleep seconds nobody else uses
    stopped = CommandAgent(["sh", "-c", f"sleep {marker} & sleep {marker}"])
    async with FakeModelServer() as fake, InterceptionProxy(Upstream(fake.url)) as proxy:
        run = await rollout(say(word="x"), stopped, proxy=proxy, timeout=1)
    assert run.error is not None
    assert await gone(f"sleep\0{marker}")
    finished = CommandAgent(["sh", "-c", f"sleep {marker} & echo x"])  # it keeps stdout open
    run = await rollout(say(word="x"), finished)
    assert run.reward == 1.0
    assert await gone(f"sleep\0{marker}")
