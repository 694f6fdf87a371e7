"""`ContainerRuntime` on a real engine: podman here, docker too where an engine answers.

The image is built once per session by `python_image` (this interpreter and proctor,
imported without a registry) and found again by its content hash in later sessions.
"""

from __future__ import annotations

import asyncio
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from proctor import RemoteError, RuntimeLaunchError, Task
from proctor.agents import agent_from_fn
from proctor.channel import connect
from proctor.engine import rollout
from proctor.runtimes._container import ContainerRuntime, Engine
from proctor.runtimes._image import python_image
from proctor.testing import RUNTIME_CHECKS, check_runtime, conformance_env

HERE = Path(__file__).resolve().parent
ECHO = conformance_env.echo(text="hello")
SLEEP = "import time; time.sleep(60)"
RUNC = "/usr/sbin/runc"  # crun fails on these hosts' cgroups; podman takes runc by path


def _problem(engine: str) -> str | None:
    """Why `engine` cannot run containers here, or None."""
    if shutil.which(engine) is None:
        return f"{engine} is not installed"
    try:
        info = subprocess.run([engine, "info"], capture_output=True, text=True, timeout=60)
    except subprocess.TimeoutExpired:
        return f"`{engine} info` did not answer within 60s"
    if info.returncode != 0:
        last = (info.stderr.strip().splitlines() or ["?"])[-1]
        return f"the {engine} CLI is installed but no engine answers `{engine} info`: {last}"
    return None


@pytest.fixture(scope="session", params=["podman", "docker"])
def engine(request: pytest.FixtureRequest) -> Engine:
    name: Engine = request.param
    problem = _problem(name)
    if problem is None:
        return name
    if name == "podman":  # `make test` installs it: its absence is a broken setup
        pytest.fail(f"{problem}; install it with `apt-get install -y podman runc`")
    pytest.skip(problem)


@pytest.fixture(scope="session")
def image(engine: Engine) -> str:
    return python_image(engine=engine)


@pytest.fixture
def options(engine: Engine) -> dict[str, Any]:
    """Engine options every runtime here gets."""
    if engine == "podman" and os.path.exists(RUNC):
        return {"engine": engine, "oci_runtime": RUNC}
    return {"engine": engine}


@pytest.fixture
def leftovers(engine: Engine) -> Iterator[Callable[[str], list[str]]]:
    """`leftovers(batch)`: that batch's containers; any still there at the end are removed."""
    batches: set[str] = set()

    def find(batch: str) -> list[str]:
        batches.add(batch)
        argv = [engine, "ps", "-a", "-q", f"--filter=label=proctor.batch={batch}"]
        return subprocess.run(argv, capture_output=True, text=True, check=True).stdout.split()

    yield find
    for batch in list(batches):
        if ids := find(batch):
            subprocess.run([engine, "rm", "-f", *ids], capture_output=True, check=False)


def _inspect(engine: str, container: str, template: str) -> str:
    argv = [engine, "inspect", "--format", template, container]
    return subprocess.run(argv, capture_output=True, text=True, check=True).stdout.strip()


# --- the contract -------------------------------------------------------------------------


@pytest.fixture
def short_tmp(monkeypatch: pytest.MonkeyPatch) -> Iterator[str]:
    """A fresh temporary folder with a short path, made the default for `tempfile`."""
    folder = tempfile.mkdtemp(prefix="pc-", dir="/tmp")  # Unix socket paths are short
    monkeypatch.setattr(tempfile, "tempdir", folder)
    yield folder
    shutil.rmtree(folder, ignore_errors=True)


@pytest.mark.parametrize("network", ["none", "bridge"])
async def test_passes_the_conformance_suite(
    image: str,
    options: dict[str, Any],
    short_tmp: str,
    leftovers: Callable[[str], list[str]],
    network: str,
) -> None:
    # The checker's marker folders go in short_tmp, mounted at the same path inside.
    # On a bridge the port is published on 127.0.0.1 and the endpoint carries a token.
    runtime = ContainerRuntime(
        image,
        conformance_env.SOURCE,
        mounts=[f"{short_tmp}:{short_tmp}"],
        network=network,
        **options,
    )
    report = await check_runtime(runtime, ECHO)
    assert report.notes == []  # markers seen: tasks closed and shutdown hooks ran
    assert report.checks == list(RUNTIME_CHECKS)
    assert leftovers(runtime.batch) == []


@pytest.mark.parametrize("after", [0.0, 0.05, 0.15])
async def test_cancelling_a_start_leaves_no_container(
    image: str, options: dict[str, Any], leftovers: Callable[[str], list[str]], after: float
) -> None:
    runtime = ContainerRuntime(image, conformance_env.SOURCE, **options)

    async def enter() -> None:
        async with runtime(ECHO):
            await asyncio.Event().wait()

    starting = asyncio.create_task(enter())
    await asyncio.sleep(after)  # the engine is somewhere in creating the container
    starting.cancel()
    with pytest.raises(asyncio.CancelledError):
        await starting
    assert leftovers(runtime.batch) == []
    assert _socket_dirs(runtime.batch) == []


def test_the_image_is_found_again_by_its_content_hash(engine: Engine) -> None:
    # A source edited since the session's build (a working tree in use) makes a new
    # image here; nothing changes between these two calls.
    ref = python_image(engine=engine)
    assert ref.startswith("localhost/proctor-python:")
    built = _inspect(engine, ref, "{{.Id}}")
    assert python_image(engine=engine) == ref
    assert _inspect(engine, ref, "{{.Id}}") == built  # found, not imported again


def test_an_image_of_files_below_tmp_builds(engine: Engine, tmp_path: Path) -> None:
    # /tmp is one of the image's own folders: a project living below it (a CI clone in
    # /tmp, say) once put it in the archive twice, which the engine refuses.
    (tmp_path / "data.txt").write_text("x")
    assert str(tmp_path).startswith("/tmp/")
    ref = python_image(engine=engine, paths=[str(tmp_path)], repository="localhost/proctor-tmp")
    assert _inspect(engine, ref, "{{.Id}}")
    subprocess.run([engine, "rmi", ref], capture_output=True, check=False)


def test_python_image_names_what_it_cannot_find() -> None:
    with pytest.raises(ValueError, match="'no-such-distribution' is not installed"):
        python_image(distributions=["no-such-distribution"])
    with pytest.raises(ValueError, match="/no/such/folder does not exist"):
        python_image(paths=["/no/such/folder"])


# --- isolation ----------------------------------------------------------------------------


async def test_a_container_has_no_network_no_capabilities_and_read_only_mounts(
    image: str, options: dict[str, Any]
) -> None:
    listener = socket.create_server(("127.0.0.1", 0))  # on this machine's loopback
    runtime = ContainerRuntime(
        image,
        str(HERE / "container_env.py"),
        env={"PROCTOR_TEST_VALUE": "s3cret"},
        mounts=[f"{HERE}:{HERE}:ro"],
        **options,
    )
    task = Task(env="container-probe", id="facts", args={"host_port": listener.getsockname()[1]})
    exposed: list[int] = []

    def agent(prompt: str) -> str:  # runs while the container does
        exposed.extend(_processes_mentioning("s3cret"))
        return prompt

    with listener:
        async with runtime:
            run = await rollout(task, agent_from_fn(agent), runtime=runtime)
    assert run.status == "completed", run.error
    assert exposed == []  # the value is in no command line
    facts = json.loads(run.prompt)
    assert facts == {
        "interfaces": ["lo"],
        "outside": "ENETUNREACH",
        "host_loopback": "ECONNREFUSED",  # the container's own loopback, not ours
        "write_mount": "EROFS",
        "capabilities": "0000000000000000",
        "value": "s3cret",
    }


async def test_a_published_port_is_on_loopback_only_and_needs_the_token(
    engine: Engine, image: str, options: dict[str, Any], leftovers: Callable[[str], list[str]]
) -> None:
    runtime = ContainerRuntime(image, conformance_env.SOURCE, network="bridge", **options)
    async with runtime, runtime(ECHO) as endpoint:
        assert endpoint.url.startswith("tcp://127.0.0.1:") and endpoint.token
        (container,) = leftovers(runtime.batch)
        ports = _inspect(engine, container, "{{json .NetworkSettings.Ports}}")
        assert [b["HostIp"] for b in json.loads(ports)["8000/tcp"]] == ["127.0.0.1"]
        with pytest.raises(RemoteError, match="token"):
            async with connect(endpoint.url, ready_timeout=10):
                pass
        async with connect(endpoint.url, token=endpoint.token) as client:
            assert client.manifest is not None
            assert client.manifest.env_name == "conformance"
    assert leftovers(runtime.batch) == []
    run = await rollout(ECHO, agent_from_fn(lambda p: p), runtime=runtime)
    assert run.status == "completed" and run.reward == 1.0, run.error


async def test_resources_labels_and_image_come_from_the_task(
    engine: Engine, image: str, options: dict[str, Any], leftovers: Callable[[str], list[str]]
) -> None:
    runtime = ContainerRuntime(
        source=conformance_env.SOURCE,
        resources={"cpus": 1, "memory": "1g"},
        labels={"team": "evals"},
        **options,
    )
    task = ECHO.model_copy(
        update={"runtime_config": {"image": image, "resources": {"memory": "256m", "pids": 64}}}
    )
    async with runtime(task):
        (container,) = leftovers(runtime.batch)
        limits = _inspect(
            engine,
            container,
            "{{.HostConfig.NanoCpus}} {{.HostConfig.Memory}} {{.HostConfig.PidsLimit}}",
        )
        assert limits.split() == ["1000000000", str(256 << 20), "64"]
        labels = json.loads(_inspect(engine, container, "{{json .Config.Labels}}"))
        assert labels["proctor.batch"] == runtime.batch and labels["team"] == "evals"
        assert len(labels["proctor.rollout"]) == 16
    assert leftovers(runtime.batch) == []


# --- failures and cleanup -----------------------------------------------------------------


async def test_launch_failures_name_their_cause_and_leave_nothing(
    image: str, options: dict[str, Any], leftovers: Callable[[str], list[str]]
) -> None:
    # PID 1 without a SIGTERM handler ignores SIGTERM: these get SIGKILL after 1 s.
    cases: list[tuple[dict[str, Any], str]] = [
        ({"image": "localhost/no-such-image:1", "source": "x.py"}, "exited with code"),
        (
            {"command": ["python", "-c", "import sys; sys.exit('cannot serve today')"]},
            "cannot serve today",
        ),
        (
            {"command": ["python", "-c", SLEEP], "startup_timeout": 1, "stop_timeout": 1},
            "no announcement within 1s",
        ),
        (
            {
                "command": ["python", "-c", f"print('PROCTOR_SERVE_PORT=8000'); {SLEEP}"],
                "stop_timeout": 1,
            },
            "network 'none' has no ports",
        ),
    ]
    for config, why in cases:
        runtime = ContainerRuntime(**{"image": image, **options, **config})
        with pytest.raises(RuntimeLaunchError, match=why):
            async with runtime(ECHO):
                pass
        assert leftovers(runtime.batch) == [], why


async def test_a_container_that_exits_mid_rollout_is_removed_too(
    image: str, options: dict[str, Any], leftovers: Callable[[str], list[str]]
) -> None:
    announce_and_exit = "print('PROCTOR_SERVE_UNIX=/run/proctor/env.sock')"
    runtime = ContainerRuntime(image, command=["python", "-c", announce_and_exit], **options)
    async with runtime(ECHO):
        assert await _poll(lambda: _exited(options["engine"], runtime.batch), within=10)
        assert await _poll(lambda: not _clients(runtime.batch), within=10)  # client gone too
    assert leftovers(runtime.batch) == []


def _exited(engine: str, batch: str) -> bool:
    argv = [engine, "ps", "-a", "-q", f"--filter=label=proctor.batch={batch}"]
    argv.append("--filter=status=exited")
    return bool(subprocess.run(argv, capture_output=True, text=True, check=True).stdout.split())


async def test_reconcile_removes_what_a_killed_driver_left(
    image: str, options: dict[str, Any], leftovers: Callable[[str], list[str]]
) -> None:
    batch = f"crashed-{os.getpid()}"
    _crash_a_driver(image, batch, options)
    assert len(leftovers(batch)) == 2 == len(_socket_dirs(batch))  # the crash left both
    removed = await ContainerRuntime(batch=batch, **options).reconcile()
    assert len(removed) == 2
    assert leftovers(batch) == []
    assert _socket_dirs(batch) == []
    # The driver's engine clients, orphaned by the crash, end with their containers.
    assert await _poll(lambda: not _clients(batch), within=10), _clients(batch)


def _crash_a_driver(image: str, batch: str, options: dict[str, Any]) -> None:
    """Run a driver that starts two containers, then kill it with SIGKILL."""
    argv = [sys.executable, str(HERE / "container_driver.py"), image, batch, "2"]
    argv += [f"--{k.replace('_', '-')}={v}" for k, v in options.items()]
    with subprocess.Popen(argv, stdout=subprocess.PIPE, text=True) as driver:
        try:
            assert driver.stdout is not None
            assert driver.stdout.readline() == "up\n"
        finally:
            driver.send_signal(signal.SIGKILL)


def _socket_dirs(batch: str) -> list[Path]:
    return list(Path(tempfile.gettempdir()).glob(f"proctor-{batch}-*"))


async def _poll(check: Callable[[], bool], within: float) -> bool:
    """Whether `check()` comes true within `within` seconds."""
    deadline = time.monotonic() + within
    while time.monotonic() < deadline:
        if check():
            return True
        await asyncio.sleep(0.05)
    return check()


def _clients(batch: str) -> list[int]:
    """Processes whose command line carries this batch's label (engine clients)."""
    return _processes_mentioning(f"proctor.batch={batch}")


def _processes_mentioning(text: str) -> list[int]:
    """Pids of the processes whose command line contains `text`."""
    found = []
    for entry in os.scandir("/proc"):
        if entry.name.isdigit():
            try:
                cmdline = Path(entry.path, "cmdline").read_bytes()
            except OSError:
                continue
            if text.encode() in cmdline:
                found.append(int(entry.name))
    return found


async def test_reconcile_refuses_to_match_every_container(options: dict[str, Any]) -> None:
    with pytest.raises(ValueError, match="at least one label"):
        await ContainerRuntime(**options).reconcile({})


@pytest.mark.parametrize(
    ("kwargs", "why"),
    [
        ({"network": "host"}, "network must be 'none' or a network name"),
        ({"port": 0}, "port must be 1-65535"),
        ({"batch": "a b"}, "batch must be"),
        ({"source": "a.py", "command": ["x"]}, "a source or a command, not both"),
        ({"mounts": ["/tmp"]}, "HOST:CONTAINER"),
        ({"mounts": ["/no/such/path:/x"]}, "does not exist"),
        ({"mounts": ["/tmp:relative"]}, "must be absolute"),
        ({"resources": {"cpus": -1}}, "cpus must be a positive number"),
        ({"resources": {"memory": "lots"}}, "memory must be bytes"),
        ({"resources": {"pids": True}}, "pids must be a positive integer"),
        ({"engine": "lxc"}, "engine must be 'podman', 'docker' or None"),
    ],
)
def test_bad_arguments_are_refused(kwargs: dict[str, Any], why: str) -> None:
    with pytest.raises(ValueError, match=why):
        ContainerRuntime("image", **kwargs)


async def test_a_task_without_an_image_is_refused(options: dict[str, Any]) -> None:
    runtime = ContainerRuntime(source="env.py", **options)
    with pytest.raises(ValueError, match="no image for task"):
        async with runtime(ECHO):
            pass


async def test_a_failed_shutdown_hook_is_recorded_on_the_run(
    image: str,
    options: dict[str, Any],
    short_tmp: str,
    leftovers: Callable[[str], list[str]],
) -> None:
    source = str(HERE / "teardown_env.py")
    runtime = ContainerRuntime(
        image, source, batch="teardown-hook", mounts=[f"{HERE}:{HERE}:ro"], **options
    )
    task = Task(env="teardown-probe", id="answer")
    run = await rollout(task, agent_from_fn(lambda prompt: "anything"), runtime=runtime)
    assert run.grade is not None and run.grade.reward == 1.0
    assert run.error is not None and run.error.phase == "teardown", run.error
    assert run.error.type == "TeardownError" and "shutdown boom" in run.error.message
    assert leftovers("teardown-hook") == []
