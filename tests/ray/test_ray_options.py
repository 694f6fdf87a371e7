"""Ray options and bad input, checked without a cluster (nothing here connects to Ray)."""

from __future__ import annotations

import asyncio
import pickle
from typing import Any

import pytest

from proctor import RuntimeLaunchError, Task, Taskset
from proctor.agents import Run
from proctor.engine import run_taskset
from proctor.engine._ray_executor import RayExecutor, _settled
from proctor.proxy import InterceptionProxy
from proctor.runtimes._ray import RayRuntime, placement
from proctor.testing import conformance_env

ROW = Task(env="conformance", id="echo", args={"text": "hi"})


async def noop(run: Run) -> None:
    run.trace.content = run.prompt


def row(resources: Any) -> Task:
    return ROW.model_copy(update={"runtime_config": {"resources": resources}})


def test_placement_maps_names_to_ray_options() -> None:
    assert placement({}) == {}
    assert placement({"cpus": 1, "gpus": 0.5, "memory": 1024, "node_b": 1}) == {
        "num_cpus": 1.0,
        "num_gpus": 0.5,
        "memory": 1024,
        "resources": {"node_b": 1.0},
    }
    assert placement({"CPU": 2, "GPU": 1}) == {"num_cpus": 2.0, "num_gpus": 1.0}


@pytest.mark.parametrize(
    ("size", "nbytes"),
    [("512", 512), ("512b", 512), ("4k", 4096), ("1.5m", 1572864), ("2G", 2 << 30),
     ("1GiB", 1 << 30), (" 3 m ", 3 << 20)],
)  # fmt: skip
def test_memory_sizes(size: str, nbytes: int) -> None:
    assert placement({"memory": size}) == {"memory": nbytes}


@pytest.mark.parametrize(
    ("resources", "message"),
    [
        ({"cpus": -1}, "cpus must be a number >= 0"),
        ({"cpus": True}, "cpus must be a number >= 0"),
        ({"gpus": "1"}, "gpus must be a number >= 0"),
        ({"node_b": float("nan")}, "node_b must be a number >= 0"),
        ({"node_b": float("inf")}, "node_b must be finite"),
        ({"memory": "lots"}, "memory must be bytes or a size like '512m'"),
        ({"": 1}, "resource names are non-empty strings"),
    ],
)
def test_bad_resources_are_named(resources: dict[str, Any], message: str) -> None:
    with pytest.raises(ValueError, match=message):
        placement(resources)
    with pytest.raises(ValueError, match=message):
        RayRuntime(conformance_env.SOURCE, resources=resources)
    with pytest.raises(RuntimeLaunchError, match=f"echo-.*runtime_config.resources: {message}"):
        RayRuntime(conformance_env.SOURCE).options(row(resources))


def test_runtime_options_overlay_the_row_on_the_defaults() -> None:
    runtime = RayRuntime(conformance_env.SOURCE, resources={"cpus": 1, "node_a": 1})
    assert runtime.options(ROW) == {"num_cpus": 1.0, "resources": {"node_a": 1.0}}
    assert runtime.options(row({"cpus": 0.25, "memory": "1m"})) == {
        "num_cpus": 0.25,
        "memory": 1 << 20,
        "resources": {"node_a": 1.0},
    }
    with pytest.raises(RuntimeLaunchError, match="must be a mapping"):
        runtime.options(row(["cpus"]))


def test_runtime_pickles_for_the_workers() -> None:
    runtime = RayRuntime("relative/env.py", address="127.0.0.1:6379", resources={"x": 1})
    copy = pickle.loads(pickle.dumps(runtime))
    assert copy.source == runtime.source and copy.source.startswith("/")  # resolved here
    assert copy.options(ROW) == {"resources": {"x": 1.0}}
    assert repr(copy) == f"RayRuntime({runtime.source!r}, address='127.0.0.1:6379')"


def test_executor_options_are_checked() -> None:
    with pytest.raises(ValueError, match="shards must be >= 1"):
        RayExecutor(shards=0)
    with pytest.raises(ValueError, match="concurrency must be >= 1"):
        RayExecutor(concurrency=0)
    with pytest.warns(DeprecationWarning, match="max_concurrent bounds"):
        RayExecutor(concurrency=4)  # the job's max_concurrent is the one bound now
    with pytest.raises(ValueError, match="memory must be"):
        RayExecutor(resources={"memory": "?"})
    with pytest.raises(ValueError, match="settle must be >= 0 seconds"):
        RayExecutor(settle=-1)
    assert RayExecutor(resources={"worker": 1}).options == {
        "num_cpus": 0,
        "resources": {"worker": 1.0},
    }
    assert RayExecutor(resources={"cpus": 1}).options == {"num_cpus": 1.0}


async def test_run_taskset_rejects_unknown_executors() -> None:
    with pytest.raises(ValueError, match="executor must be 'local', 'ray' or a RayExecutor"):
        await run_taskset([ROW], noop, executor="dask")  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="executor must be"):
        await Taskset("t", [ROW]).run(noop, executor="threads")  # type: ignore[arg-type]


async def test_the_proxy_stays_local() -> None:
    proxy = InterceptionProxy("http://127.0.0.1:9")
    with pytest.raises(ValueError, match="proxy= serves agents in this process"):
        await run_taskset([ROW], noop, executor="ray", proxy=proxy)
    with pytest.raises(ValueError, match="proxy= serves agents in this process"):
        await Taskset("t", [ROW]).run(noop, executor=RayExecutor(), proxy=proxy)


async def test_an_empty_job_needs_no_cluster() -> None:
    job = await run_taskset([], noop, executor=RayExecutor(address="127.0.0.1:9"))
    assert job.runs == []


async def test_phases_are_reported_once_they_last() -> None:
    phases: asyncio.Queue[str | None] = asyncio.Queue()
    reported = _settled(phases, 0.05)
    for phase in ("provisioning", "connecting", "starting", "agent"):
        phases.put_nowait(phase)
    assert await anext(reported) == "agent"  # the rest were over within 50 ms
    for later in ("grading", "teardown", None):
        phases.put_nowait(later)
    assert [p async for p in reported] == []


def test_a_ray_lease_is_positive_seconds() -> None:
    assert RayExecutor(lease=30).lease == 30 and RayExecutor().lease is None
    with pytest.raises(ValueError, match="lease must be > 0 seconds"):
        RayExecutor(lease=0)


def test_a_ray_batch_recorded_before_its_lease_keeps_its_digest() -> None:
    from proctor.batch import BatchConfig

    def digest(runtime: dict[str, Any], executor: dict[str, Any]) -> str:
        doc = {
            "taskset": {"source": "tasks.jsonl"},
            "agents": [{"kind": "python", "agent": "agent.py:solve"}],
            "runtime": runtime,
            "executor": executor,
            "max_concurrent": 2,
            "expected_rollouts": 2,
        }
        return BatchConfig.model_validate(doc).digest()

    ray = {"kind": "ray", "address": "127.0.0.1:1"}
    local = {"kind": "local", "trusted": True}
    before = digest(ray, {"kind": "local"}), digest(local, ray)  # as recorded before `lease`
    assert digest({**ray, "lease": 30}, {"kind": "local"}) == before[0]  # the default
    assert digest(local, {**ray, "lease": 30}) == before[1]
    assert digest({**ray, "lease": 0}, {"kind": "local"}) != before[0]
    assert digest(local, {**ray, "lease": 0}) != before[1]
