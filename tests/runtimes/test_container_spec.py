"""`ContainerSpec`, the parameter object of `ContainerRuntime`: made and checked once,
taken whole or built from keywords; the `run` command line it makes (no engine runs)."""

from __future__ import annotations

import dataclasses
import shutil
from typing import Any

import pytest

from proctor import Task
from proctor.runtimes import ContainerRuntime, ContainerSpec
from proctor.runtimes._container import Engine

TASK = Task(env="probe", id="echo", runtime_config={"resources": {"memory": "256m"}})
ENGINE: Engine = "podman" if shutil.which("podman") else "docker"


def test_keywords_and_a_spec_make_the_same_runtime() -> None:
    fields: dict[str, Any] = {
        "network": "bridge",
        "port": 9000,
        "resources": {"cpus": 1},
        "batch": "b1",
    }
    by_keyword = ContainerRuntime("img", "env.py", engine=ENGINE, **fields)
    spec = ContainerSpec(image="img", source="env.py", engine=ENGINE, **fields)
    whole = ContainerRuntime(spec)
    assert by_keyword.spec == spec == whole.spec
    assert by_keyword.batch == whole.batch == "b1"
    assert ContainerRuntime(image="img", source="env.py", engine=ENGINE, **fields).spec == spec


def test_the_run_command_line_comes_from_the_spec() -> None:
    spec = ContainerSpec(
        image="img",
        source="/env/tasks.py",
        network="bridge",
        port=9000,
        env={"KEY": "secret"},
        resources={"cpus": 1.5, "memory": "512m"},
        ulimits={"nofile": 64, "nproc": (10, 20)},
        labels={"team": "x"},
        args=["--read-only"],
    )
    argv = spec.run_argv(["podman"], TASK, "b1", "proctor-r1", "r1", None)
    assert argv[:2] == ["podman", "run"]
    assert "--label=proctor.batch=b1" in argv and "--label=team=x" in argv
    assert argv[argv.index("-p") + 1] == "127.0.0.1::9000"
    assert argv[argv.index("--memory") + 1] == "256m"  # the task's resources win, key by key
    assert argv[argv.index("--cpus") + 1] == "1.5"
    assert "--ulimit=nofile=64:64" in argv and "--ulimit=nproc=10:20" in argv
    assert "--env=KEY" in argv and "secret" not in " ".join(argv)  # values stay off argv
    tail = argv[argv.index("--read-only") + 1 :]
    assert tail[:5] == ["img", "python", "-m", "proctor.serve", "/env/tasks.py"]
    assert tail[-4:] == ["--port", "9000", "--token-env", "PROCTOR_TOKEN"]


def test_a_spec_is_frozen_and_a_replaced_one_is_checked_again() -> None:
    spec = ContainerSpec(image="img", source="env.py")
    with pytest.raises(dataclasses.FrozenInstanceError):
        spec.port = 1  # type: ignore[misc]
    assert dataclasses.replace(spec, port=9000).port == 9000
    with pytest.raises(ValueError, match="port must be 1-65535"):
        dataclasses.replace(spec, port=0)


@pytest.mark.parametrize(
    ("args", "kwargs", "why"),
    [
        ((ContainerSpec(image="img"),), {"network": "bridge"}, "takes no other arguments"),
        ((ContainerSpec(image="img"), "env.py"), {}, "takes no other arguments"),
        (("img",), {"image": "other"}, "the image twice"),
        (("img", "env.py"), {"source": "b.py"}, "multiple values for argument 'source'"),
        (("img",), {"netwrok": "bridge"}, "netwrok"),
    ],
)
def test_mixed_or_unknown_arguments_are_refused(
    args: tuple[object, ...], kwargs: dict[str, object], why: str
) -> None:
    with pytest.raises(TypeError, match=why):
        ContainerRuntime(*args, engine=ENGINE, **kwargs)  # type: ignore[arg-type]
