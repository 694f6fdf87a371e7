"""`SandboxRuntime`: bubblewrap isolation, proved from inside and outside the sandbox.

Every scenario runs the probing environment in `sandbox_env.py` for real: what it can
write, read and reach is reported from inside; which processes exist is checked from
the host by pid namespace.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import secrets
import shutil
import signal
import socket
import subprocess
import sys
import textwrap
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any, Literal

import pytest

from proctor import RuntimeLaunchError, Task
from proctor.agents import Run, agent_from_fn
from proctor.engine import Timeouts, rollout
from proctor.env import ShellClient
from proctor.runtimes._sandbox import SandboxRuntime
from proctor.runtimes._sandbox_host import HOST_UIDS, SANDBOX_UID
from proctor.testing import RUNTIME_CHECKS, check_runtime, conformance_env

pytestmark = pytest.mark.skipif(
    shutil.which("bwrap") is None,
    reason="bubblewrap is not installed (apt-get install -y bubblewrap)",
)

SOURCE = Path(__file__).with_name("sandbox_env.py")
Network = Literal["none", "host"]
MODES = [
    pytest.param(False, "none", id="cold-none"),
    pytest.param(True, "none", id="warm-none"),
    pytest.param(False, "host", id="cold-host"),
    pytest.param(True, "host", id="warm-host"),
]
ECHO_PROMPT = agent_from_fn(lambda prompt: prompt)


def probe_task(template: str, limits: dict[str, Any] | None = None, **args: Any) -> Task:
    config = {"limits": limits} if limits is not None else None
    return Task(env="sandbox-probe", id=template, args=args, runtime_config=config)


def processes_in(pidns: str) -> list[int]:
    """Host pids of the processes in a pid namespace (`pid:[inode]`)."""
    found = []
    for entry in os.scandir("/proc"):
        if entry.name.isdigit():
            with contextlib.suppress(OSError):
                if os.readlink(f"/proc/{entry.name}/ns/pid") == pidns:
                    found.append(int(entry.name))
    return found


def host_uid(pid: int) -> int:
    status = Path(f"/proc/{pid}/status").read_text()
    return int(next(ln for ln in status.splitlines() if ln.startswith("Uid:")).split()[1])


def eventually(check: Callable[[], bool], seconds: float = 5.0) -> bool:
    deadline = time.monotonic() + seconds
    while not check():
        if time.monotonic() > deadline:
            return False
        time.sleep(0.01)
    return True


def our_children() -> set[int]:
    me = str(os.getpid())
    out = set()
    for entry in os.scandir("/proc"):
        with contextlib.suppress(OSError):
            stat = Path(entry.path, "stat").read_text()
            if entry.name.isdigit() and stat[stat.rindex(")") + 2 :].split()[1] == me:
                out.add(int(entry.name))
    return out


@pytest.fixture
def outbox(tmp_path: Path) -> Path:
    """A folder the sandbox may write to (for evidence of shutdown hooks)."""
    folder = tmp_path / "out"
    folder.mkdir()
    folder.chmod(0o777)  # the sandbox's host uid is the runtime's own
    return folder


@pytest.fixture
def broken(tmp_path: Path) -> Path:
    """A source that fails to import, in a folder the sandbox user may read."""
    tmp_path.chmod(0o755)
    source = tmp_path / "broken.py"
    source.write_text("raise ImportError('missing dependency xyz')\n")
    return source


@pytest.fixture
def private(tmp_path: Path) -> Path:
    """A source in a folder only its owner (root) may enter."""
    tmp_path.chmod(0o700)
    source = tmp_path / "env.py"
    source.write_text("")
    return source


@pytest.fixture
def secret_in_home() -> Iterator[Path]:
    """A world-readable file planted in the host user's home."""
    path = Path.home() / f".proctor-sandbox-secret-{secrets.token_hex(4)}"
    path.write_text("top secret")
    path.chmod(0o644)
    try:
        yield path
    finally:
        path.unlink()


@pytest.fixture
def listener() -> Iterator[socket.socket]:
    """A listener on the host's loopback, to be dialed from inside."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        sock.listen()
        sock.setblocking(False)
        yield sock


# -- the contract -------------------------------------------------------------------------


@pytest.mark.parametrize(("warm", "network"), MODES)
async def test_passes_the_conformance_suite(warm: bool, network: Network) -> None:
    runtime = SandboxRuntime(conformance_env.SOURCE, warm=warm, network=network)
    async with runtime:
        report = await check_runtime(runtime, conformance_env.env.tasks["echo"](text="hi"))
    assert report.checks == list(RUNTIME_CHECKS)


# -- isolation ------------------------------------------------------------------------------


@pytest.mark.parametrize(("warm", "network"), MODES)
async def test_the_sandbox_confines_files_users_network_and_environment(
    warm: bool,
    network: Network,
    secret_in_home: Path,
    listener: socket.socket,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("PROCTOR_TEST_HOST_SECRET", "do not leak")
    port = listener.getsockname()[1]
    seen_uids: list[int] = []

    async def agent(run: Run) -> None:
        report = json.loads(run.prompt)
        seen_uids.extend(host_uid(pid) for pid in processes_in(report["pidns"]))
        run.trace.content = "done"

    async with SandboxRuntime(SOURCE, warm=warm, network=network) as runtime:
        run = await rollout(
            probe_task("probe", secret=str(secret_in_home), port=port), agent, runtime=runtime
        )
    assert run.reward == 1.0, run.error
    report = json.loads(run.prompt)
    # A non-root user without capabilities, inside and, when we are root, outside too.
    assert (report["uid"], report["gid"], report["groups"]) == (SANDBOX_UID, SANDBOX_UID, [])
    assert report["cap_eff"] == report["cap_bnd"] == "0000000000000000"
    assert report["no_new_privs"] == "1"
    assert seen_uids and all(uid == runtime.host_uid for uid in seen_uids)
    if os.geteuid() == 0:  # a uid of its own: no account, not nobody
        assert runtime.host_uid in HOST_UIDS
    # Writable: the work directory and the private temporaries; nothing else.
    assert report["cwd"] == report["home"] == "/sandbox"
    writes = report["write"]
    assert {k: writes.pop(k) for k in ("workdir", "tmp", "shm")} == dict.fromkeys(
        ("workdir", "tmp", "shm"), "ok"
    )
    assert set(writes.values()) <= {"EROFS", "EACCES"}, writes
    # The host's home does not exist in there; root's files are not readable.
    assert report["read"] == {"secret": "ENOENT", "shadow": "EACCES"}
    # Only the variables we set: nothing of the host's environment.
    assert "PROCTOR_TEST_HOST_SECRET" not in report["env"]
    assert set(report["env"]) <= {"PATH", "HOME", "TMPDIR", "LANG", "PYTHONUNBUFFERED",
                                  "PYTHONDONTWRITEBYTECODE", "PWD"}  # fmt: skip
    # Its own processes only: the server is the first process of its pid namespace.
    assert report["pids"][0] == 1
    if network == "none":
        assert report["interfaces"] == ["lo"]
        assert report["connect"] == "ECONNREFUSED"
        with pytest.raises(BlockingIOError):
            listener.accept()  # nothing came through
    else:
        assert report["connect"] == "ok"
        listener.accept()[0].close()


@pytest.mark.parametrize("warm", [False, True], ids=["cold", "warm"])
async def test_rollouts_do_not_see_each_others_files_or_processes(warm: bool) -> None:
    first_started = asyncio.Event()
    release = asyncio.Event()

    async def holder(run: Run) -> None:
        first_started.set()
        await release.wait()
        run.trace.content = "x"

    async with SandboxRuntime(SOURCE, warm=warm) as runtime:
        first = asyncio.create_task(rollout(probe_task("probe"), holder, runtime=runtime))
        await first_started.wait()  # the first one wrote /tmp/f and /sandbox/f, and waits
        second = await rollout(probe_task("probe"), ECHO_PROMPT, runtime=runtime)
        release.set()
        first_run = await first
    a, b = json.loads(first_run.prompt), json.loads(second.prompt)
    assert a["pidns"] != b["pidns"]
    # A fresh /tmp, not the first's: only the mount points of host paths bound under it
    # (the source and the venv, when the project itself lives below /tmp), and the
    # folder of its own shell's socket.
    own = {name for name in b["tmp"] if name.startswith("proctor-shell-")}
    assert "f" not in b["tmp"] and set(b["tmp"]) - own <= _bound_under_tmp()
    assert b["write"]["tmp"] == "ok"
    assert len(b["pids"]) < 5  # the server and whatever it runs, nobody else's


def _bound_under_tmp() -> set[str]:
    """First components of the host paths a sandbox binds that lie below /tmp."""
    paths = [Path(SOURCE), Path(sys.prefix), Path(sys.base_prefix), *map(Path, sys.path)]
    tmp = Path("/tmp")
    return {
        p.resolve().relative_to(tmp).parts[0]
        for p in paths
        if p.resolve().is_relative_to(tmp) and p.resolve() != tmp
    }


@pytest.mark.parametrize("warm", [False, True], ids=["cold", "warm"])
async def test_a_fork_bomb_stops_at_the_process_limit(warm: bool) -> None:
    async with SandboxRuntime(SOURCE, warm=warm, limits={"processes": 24}) as runtime:
        run = await rollout(probe_task("forkbomb"), ECHO_PROMPT, runtime=runtime)
    report = json.loads(run.prompt)
    assert report["error"] == "EAGAIN"
    assert 0 < report["forked"] < 24
    assert eventually(lambda: not processes_in(report["pidns"]))


# -- nothing outlives the rollout ---------------------------------------------------------


class Fails:
    async def __call__(self, run: Run) -> None:
        raise RuntimeError("the agent fails")


class Blocks:
    def __init__(self) -> None:
        self.working = asyncio.Event()

    async def __call__(self, run: Run) -> None:
        self.working.set()
        await asyncio.Event().wait()


@pytest.mark.parametrize("warm", [False, True], ids=["cold", "warm"])
@pytest.mark.parametrize("ending", ["success", "error", "timeout", "cancellation"])
async def test_every_process_is_gone_after_the_rollout(
    warm: bool, ending: str, outbox: Path
) -> None:
    runtime = SandboxRuntime(SOURCE, warm=warm, writable=[outbox], env={"PROBE_OUT": str(outbox)})
    async with runtime:
        before = our_children()
        task = probe_task("linger", tag="t")
        if ending == "success":
            run = await rollout(task, ECHO_PROMPT, runtime=runtime)
            assert run.reward == 1.0, run.error
        elif ending == "error":
            run = await rollout(task, Fails(), runtime=runtime)
            assert run.error is not None and run.error.phase == "agent"
        elif ending == "timeout":
            run = await rollout(task, Blocks(), runtime=runtime, timeout=Timeouts(agent=0.2))
            assert run.stop_reason == "timeout", run.error  # graded on what it left
        else:
            agent = Blocks()
            job = asyncio.create_task(rollout(task, agent, runtime=runtime))
            await agent.working.wait()
            job.cancel()
            with pytest.raises(asyncio.CancelledError):
                await job
        pidns = (outbox / "started-t").read_text()
        assert eventually(lambda: not processes_in(pidns)), processes_in(pidns)
        assert our_children() <= before  # no bwrap or nsenter left either
    # SIGTERM came first: the environment's shutdown hooks ran inside the sandbox.
    assert (outbox / f"shutdown-{pidns.strip('pid:[]')}").exists()


@pytest.mark.parametrize("warm", [False, True], ids=["cold", "warm"])
async def test_a_start_timeout_kills_the_sandbox(warm: bool, outbox: Path) -> None:
    runtime = SandboxRuntime(SOURCE, warm=warm, writable=[outbox], env={"PROBE_OUT": str(outbox)})
    async with runtime:
        run = await rollout(
            probe_task("stall", tag="s"), ECHO_PROMPT, runtime=runtime, timeout=Timeouts(start=0.3)
        )
        assert run.error is not None and run.error.phase == "starting"
        pidns = (outbox / "started-s").read_text()
        assert eventually(lambda: not processes_in(pidns))


def test_killing_the_parent_leaves_no_sandbox_behind(tmp_path: Path) -> None:
    script = tmp_path / "parent.py"
    script.write_text(
        textwrap.dedent(f"""
        import asyncio, json
        from proctor import Task
        from proctor.runtimes._sandbox import SandboxRuntime

        async def main():
            cold = SandboxRuntime({str(SOURCE)!r})
            warm = SandboxRuntime({str(SOURCE)!r}, warm=True)
            task = Task(env="sandbox-probe", id="linger", args={{"tag": "x"}})
            async with cold(task) as a, warm(task) as b:
                print(a.url, b.url, flush=True)
                await asyncio.sleep(600)

        asyncio.run(main())
    """)
    )
    with subprocess.Popen(
        [sys.executable, str(script)], stdout=subprocess.PIPE, text=True
    ) as parent:
        folders: list[Path] = []
        try:
            assert parent.stdout is not None
            urls = parent.stdout.readline().split()
            folders = [Path(url.removeprefix("unix://")).parent.parent for url in urls]
            sandboxed = _descendants(parent.pid)
            assert len(sandboxed) >= 4  # helper, bwrap (cold), bwrap (zygote), their children
        finally:
            parent.send_signal(signal.SIGKILL)
            parent.wait()
    try:
        assert eventually(lambda: not any(_exists(pid) for pid in sandboxed)), [
            pid for pid in sandboxed if _exists(pid)
        ]
        # The runtime had no chance to remove its folders: the next one to start does.
        assert len(folders) == 2 and all(f.name.startswith("proctor-sandbox-") for f in folders)
        assert all(folder.is_dir() for folder in folders)
        asyncio.run(_start_and_stop(SandboxRuntime(SOURCE)))
        assert not any(folder.exists() for folder in folders)
    finally:
        for folder in folders:
            shutil.rmtree(folder, ignore_errors=True)


async def _start_and_stop(runtime: SandboxRuntime) -> None:
    async with runtime:
        pass


def test_reconcile_removes_only_the_folders_of_processes_that_are_gone(tmp_path: Path) -> None:
    me = Path(f"/proc/{os.getpid()}/stat").read_text()
    start = me[me.rindex(")") + 2 :].split()[19]
    mine = tmp_path / f"proctor-sandbox-{os.getpid()}-{start}-live"
    reused = tmp_path / f"proctor-sandbox-{os.getpid()}-{int(start) - 1}-reused"  # same pid
    gone = tmp_path / f"proctor-sandbox-{2**22 + 7}-1-gone"  # above any pid_max
    other = tmp_path / "proctor-sandbox-unrelated"
    for folder in (mine, reused, gone, other):
        (folder / "stage").mkdir(parents=True)
    assert sorted(SandboxRuntime.reconcile(tmp_path)) == sorted([reused, gone])
    assert mine.is_dir() and other.is_dir() and not reused.exists() and not gone.exists()


def _descendants(root: int) -> list[int]:
    children: dict[int, list[int]] = {}
    for entry in os.scandir("/proc"):
        with contextlib.suppress(OSError):
            stat = Path(entry.path, "stat").read_text()
            if entry.name.isdigit():
                ppid = int(stat[stat.rindex(")") + 2 :].split()[1])
                children.setdefault(ppid, []).append(int(entry.name))
    out, todo = [], [root]
    while todo:
        for child in children.get(todo.pop(), []):
            out.append(child)
            todo.append(child)
    return out


def _exists(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except OSError:
        return False
    return state != "Z"


# -- limits --------------------------------------------------------------------------------


async def test_memory_and_cpu_limits_come_from_the_task() -> None:
    async with SandboxRuntime(SOURCE, warm=True, limits={"memory": "4G"}) as runtime:
        small = await rollout(
            probe_task("allocate", {"memory": "256M"}, megabytes=512), ECHO_PROMPT, runtime=runtime
        )
        big = await rollout(probe_task("allocate", megabytes=512), ECHO_PROMPT, runtime=runtime)
        burnt = await rollout(probe_task("burn", {"cpu_time": 1}), ECHO_PROMPT, runtime=runtime)
    assert small.prompt == "MemoryError"
    assert big.prompt == f"ok {512 << 20}"
    assert int(burnt.prompt) in (-signal.SIGXCPU, -signal.SIGKILL)


@pytest.mark.parametrize("warm", [False, True], ids=["cold", "warm"])
async def test_the_wall_time_limit_kills_the_sandbox(warm: bool, outbox: Path) -> None:
    async def outlives_it(run: Run) -> None:
        pidns = (outbox / "started-w").read_text()
        assert await asyncio.to_thread(eventually, lambda: not processes_in(pidns))  # killed
        run.trace.content = "late"

    runtime = SandboxRuntime(
        SOURCE, warm=warm, writable=[outbox], env={"PROBE_OUT": str(outbox)},
        limits={"wall_time": 0.5},
    )  # fmt: skip
    async with runtime:
        run = await rollout(probe_task("linger", tag="w"), outlives_it, runtime=runtime)
    assert run.error is not None and run.error.phase == "agent", run  # failed at once
    assert run.error.type == "SubstrateLost"
    assert "sandbox wall time of 0.5s is up" in run.error.message


@pytest.mark.parametrize(
    ("limits", "message"),
    [
        ({"memory": "lots"}, "expected bytes"),
        ({"processes": 0}, "positive integer"),
        ({"cpu_time": -1}, "positive seconds"),
        ({"disk": 1}, "unknown limit 'disk'"),
    ],
)
def test_bad_limits_are_refused_with_the_key_named(limits: dict[str, Any], message: str) -> None:
    with pytest.raises(ValueError, match=message):
        SandboxRuntime(SOURCE, limits=limits)


async def test_a_tasks_bad_limits_fail_its_provisioning() -> None:
    async with SandboxRuntime(SOURCE, warm=True) as runtime:
        run = await rollout(probe_task("probe", {"wall": 1}), ECHO_PROMPT, runtime=runtime)
    assert run.error is not None and run.error.phase == "provisioning"
    assert "runtime_config.limits: unknown limit 'wall'" in run.error.message


# -- capabilities and failures ------------------------------------------------------------


@pytest.mark.parametrize("network", ["none", "host"])
async def test_the_shell_capability_runs_inside_the_sandbox(
    network: Network,
) -> None:
    async def agent(run: Run) -> None:
        shell = ShellClient(run.binding("shell").url)
        result = await shell.run("id -u; pwd; echo hi > f && cat f; touch /usr/x 2>&1 || true")
        run.trace.content = result.stdout

    async with SandboxRuntime(SOURCE, warm=True, network=network) as runtime:
        run = await rollout(probe_task("probe"), agent, runtime=runtime)
    assert run.reward == 1.0, run.error
    lines = run.trace.content.splitlines()
    assert lines[:3] == [str(SANDBOX_UID), "/sandbox", "hi"]
    assert "Read-only file system" in lines[3]


@pytest.mark.parametrize("warm", [False, True], ids=["cold", "warm"])
async def test_a_source_that_fails_to_load_is_a_launch_error(warm: bool, broken: Path) -> None:
    runtime = SandboxRuntime(broken, warm=warm)
    task = Task(env="broken", id="x")
    if warm:
        with pytest.raises(RuntimeLaunchError, match="missing dependency xyz"):
            async with runtime:
                pass
    else:
        async with runtime:
            run = await rollout(task, ECHO_PROMPT, runtime=runtime)
        assert run.error is not None and run.error.phase == "provisioning"
        assert "missing dependency xyz" in run.error.message


@pytest.mark.skipif(os.geteuid() != 0, reason="the sandbox runs as this user when not root")
async def test_a_source_nobody_may_read_is_refused_with_the_fix(private: Path) -> None:
    with pytest.raises(RuntimeLaunchError, match=r"not readable by the sandbox user.*chmod o\+rx"):
        async with SandboxRuntime(private):
            pass


async def test_a_missing_bwrap_says_how_to_install_it() -> None:
    runtime = SandboxRuntime(SOURCE, bwrap="/nonexistent/bwrap")
    with pytest.raises(RuntimeLaunchError, match="apt-get install -y bubblewrap"):
        async with runtime:
            pass


async def test_a_dead_zygote_fails_its_rollouts_and_is_replaced() -> None:
    killed = asyncio.Event()
    pidns: list[str] = []

    async def outlives_it(run: Run) -> None:
        pidns.append(json.loads(run.prompt)["pidns"])
        killed.set()
        await asyncio.sleep(120)  # cut short when the sandbox dies, not after this
        run.trace.content = "late"

    async with SandboxRuntime(SOURCE, warm=True) as runtime:
        job = asyncio.create_task(rollout(probe_task("probe"), outlives_it, runtime=runtime))
        await killed.wait()
        zygote = runtime._zygote
        assert zygote is not None and zygote.proc.pid is not None
        os.kill(zygote.proc.pid, signal.SIGKILL)
        run = await asyncio.wait_for(job, 60)
        assert run.error is not None and run.error.type == "SubstrateLost"  # at once
        assert run.error.phase == "agent" and "exited" in run.error.message
        # the rollout's server died with the zygote's sandbox
        assert await asyncio.to_thread(eventually, lambda: not processes_in(pidns[0]))
        again = await rollout(probe_task("probe"), ECHO_PROMPT, runtime=runtime)
    assert again.reward == 1.0, again.error
    assert runtime._zygote is None and not zygote.alive


def test_cold_and_warm_sandboxes_run_on_uvloop() -> None:
    uvloop = pytest.importorskip("uvloop")

    async def main() -> list[float | None]:
        rewards = []
        for warm in (False, True):
            async with SandboxRuntime(SOURCE, warm=warm) as runtime:
                run = await rollout(probe_task("probe"), ECHO_PROMPT, runtime=runtime)
                rewards.append(run.reward)
        return rewards

    assert uvloop.run(main()) == [1.0, 1.0]


@pytest.mark.skipif(os.geteuid() != 0, reason="this user's runs take the unstaged path anyway")
async def test_run_by_another_user_bwrap_binds_directly(monkeypatch: pytest.MonkeyPatch) -> None:
    # As a non-root user bwrap runs as that user and binds the paths itself: no mount
    # helper, no nsenter. Exercised here by making root look like someone else (cold
    # only: a bwrap run by root itself covers parts of /proc, which keeps the warm
    # children from mounting their own; an unprivileged bwrap, the real case, does not).
    monkeypatch.setattr(os, "geteuid", lambda: 1000)
    async with SandboxRuntime(SOURCE) as runtime:
        run = await rollout(probe_task("probe"), ECHO_PROMPT, runtime=runtime)
        assert runtime._host is not None and runtime._host.helper is None
    assert run.reward == 1.0, run.error
    report = json.loads(run.prompt)
    assert report["uid"] == SANDBOX_UID and report["cap_eff"] == "0000000000000000"
    assert report["write"]["usr"] == "EROFS" and report["write"]["workdir"] == "ok"


# -- default limits ------------------------------------------------------------------------


@pytest.mark.parametrize("warm", [False, True], ids=["cold", "warm"])
async def test_default_limits_cap_every_tmpfs_processes_and_user_namespaces(warm: bool) -> None:
    async with SandboxRuntime(SOURCE, warm=warm) as runtime:
        filled = {}
        for folder in ("/tmp", "/sandbox", "/dev/shm"):
            run = await rollout(probe_task("fill", folder=folder), ECHO_PROMPT, runtime=runtime)
            filled[folder] = json.loads(run.prompt)
        bomb = await rollout(probe_task("forkbomb"), ECHO_PROMPT, runtime=runtime)
        nested = await rollout(probe_task("nested_userns"), ECHO_PROMPT, runtime=runtime)
    for folder, report in filled.items():  # 1.5 GiB asked for: stopped at the 512 MiB cap
        assert report["error"] == "ENOSPC", (folder, report)
        assert 500 <= report["megabytes"] <= 512, (folder, report)
    report = json.loads(bomb.prompt)
    assert report["error"] == "EAGAIN" and 0 < report["forked"] < 256, report
    assert eventually(lambda: not processes_in(report["pidns"]))
    assert json.loads(nested.prompt)["code"] != 0, nested.prompt


async def test_a_task_overrides_the_tmpfs_and_file_size_limits() -> None:
    async with SandboxRuntime(SOURCE, limits={"tmpfs": "64M"}) as runtime:
        small = await rollout(probe_task("fill", folder="/tmp", megabytes=100), ECHO_PROMPT,
                              runtime=runtime)  # fmt: skip
        big = await rollout(
            probe_task("fill", {"tmpfs": "256M"}, folder="/tmp", megabytes=100),
            ECHO_PROMPT, runtime=runtime,
        )  # fmt: skip
        capped = await rollout(
            probe_task("fill", {"file_size": "16M"}, folder="/tmp", megabytes=100),
            ECHO_PROMPT, runtime=runtime,
        )  # fmt: skip
    assert json.loads(small.prompt)["error"] == "ENOSPC"
    assert json.loads(big.prompt) == {"megabytes": 100, "error": ""}
    assert json.loads(capped.prompt) == {"megabytes": 16, "error": "EFBIG"}


def test_the_defaults_are_documented_and_none_lifts_one() -> None:
    default = SandboxRuntime(SOURCE).limits
    assert (default.memory, default.processes) == (2 << 30, 256)
    assert (default.file_size, default.tmpfs) == (1 << 30, 512 << 20)
    assert default.cpu_time is None and default.wall_time is None
    lifted = SandboxRuntime(SOURCE, limits={"memory": None, "tmpfs": "1G"}).limits
    assert lifted.memory is None and lifted.tmpfs == 1 << 30 and lifted.processes == 256
