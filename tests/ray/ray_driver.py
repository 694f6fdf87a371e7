"""Run the Ray scenarios against a fresh two-node cluster; write the results as JSON.

Usage (inside the namespace `ray_cluster.in_namespace` builds):
`python ray_driver.py RESULTS.json [SCENARIO ...]`. One cluster start serves every scenario; each
scenario's outcome (or its traceback) lands under its name, for the tests to judge.
"""

from __future__ import annotations

import asyncio
import json
import os
import signal
import socket
import sys
import threading
import time
import traceback
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).parent))
sys.path.insert(1, str(Path(__file__).parents[1]))  # tests/_support

from ray_cluster import HEAD_LABEL, WORKER_LABEL, LocalCluster, listeners, loopback_up
from ray_lease import (
    lease_lapses,
    lease_resume,
    lease_supervisor_killed,
    shards_keeper_killed,
    shards_lapse,
    shards_resume,
)

from proctor import Task, Taskset
from proctor.agents import Run
from proctor.engine import rollout, run_taskset
from proctor.engine._ray_executor import RayExecutor
from proctor.runtimes import LocalRuntime
from proctor.runtimes._ray import RayRuntime
from proctor.testing import check_runtime, conformance_env

ENV_SOURCE = str(Path(__file__).with_name("ray_env.py"))
Scenario = Callable[["Context"], Awaitable[dict[str, Any]]]


class Context:
    def __init__(self, cluster: LocalCluster, nodes: dict[str, str], scratch: Path) -> None:
        self.cluster = cluster
        self.nodes = nodes
        self.scratch = scratch

    def folder(self, name: str) -> Path:
        path = self.scratch / name
        path.mkdir()
        return path


def where_rows(n: int, **config: Any) -> Taskset:
    rows = [Task(env="ray-where", id="where", args={"i": i}, runtime_config=config or None)
            for i in range(n)]  # fmt: skip
    return Taskset("where", rows)


def agent_node() -> str | None:
    import ray

    return ray.get_runtime_context().get_node_id() if ray.is_initialized() else None


def summary(run: Run) -> dict[str, Any]:
    prompt = json.loads(run.prompt) if isinstance(run.prompt, str) else {}
    loops = [s.content for s in run.trace.steps if s.kind == "assistant"]
    return {
        "i": run.task.args.get("i"),
        "status": run.status,
        "reward": run.reward,
        "error": None if run.error is None else [run.error.phase, run.error.type],
        "env_node": prompt.get("node"),
        "agent_node": loops[0]["node"] if loops else None,
    }


# -- agents (defined in __main__, so Ray ships them by value) ----------------------------------


class Echo:
    """Answers the prompt and records the node its loop ran on."""

    async def __call__(self, run: Run) -> None:
        run.trace.add("assistant", {"node": agent_node(), "pid": os.getpid()})
        run.trace.content = run.prompt


class Board:
    """Where agents on the workers and the driver meet (a Ray actor: no files, no polls)."""

    def __init__(self) -> None:
        self.posts: list[int] = []
        self.posted = asyncio.Condition()
        self.opened = asyncio.Event()

    async def post(self, value: int) -> None:
        async with self.posted:
            self.posts.append(value)
            self.posted.notify_all()

    async def posts_when(self, count: int) -> list[int]:
        async with self.posted:
            await self.posted.wait_for(lambda: len(self.posts) >= count)
            return self.posts

    def open(self) -> None:
        self.opened.set()

    async def when_open(self) -> None:
        await self.opened.wait()


def board() -> Any:
    import ray

    return ray.remote(Board).options(num_cpus=0).remote()


class FirstWaits(Echo):
    """Row 0 waits until the driver has been handed row 1's run."""

    def __init__(self, gate: Any) -> None:
        self.gate = gate

    async def __call__(self, run: Run) -> None:
        if run.task.args["i"] == 0:
            await self.gate.when_open.remote()
        await super().__call__(run)


class HoldOn(Echo):
    """Posts its pid, then blocks forever, on `node` (on every node when None).

    With `settle=0`, the shard has recorded the agent phase in the GCS before this
    runs, so the post (whose answer tells the driver to kill) cannot outrun it.
    """

    def __init__(self, board: Any, node: str | None) -> None:
        self.board = board
        self.node = node

    async def __call__(self, run: Run) -> None:
        await super().__call__(run)
        if self.node is None or agent_node() == self.node:
            await self.board.post.remote(os.getpid())
            await asyncio.Event().wait()


# -- scenarios ---------------------------------------------------------------------------------


async def cluster_up(ctx: Context) -> dict[str, Any]:
    return {"nodes": ctx.nodes, "listeners": listeners()}


async def token_required(ctx: Context) -> dict[str, Any]:
    """A GCS call with the cluster's token, and with a wrong one."""
    code = (
        "import ray._raylet as r; "
        f"r.GcsClient(address={ctx.cluster.address!r}).internal_kv_get(b'k', b'', timeout=10)"
    )
    out: dict[str, Any] = {"mode": os.environ.get("RAY_AUTH_MODE")}
    for name, token in (("right", os.environ["RAY_AUTH_TOKEN"]), ("wrong", "0" * 64)):
        proc = await asyncio.create_subprocess_exec(
            sys.executable, "-c", code, env={**os.environ, "RAY_AUTH_TOKEN": token},
            stdout=asyncio.subprocess.DEVNULL, stderr=asyncio.subprocess.PIPE,
        )  # fmt: skip
        _, err = await asyncio.wait_for(proc.communicate(), 30)
        last = (err.decode(errors="replace").strip().splitlines() or [""])[-1]
        out[name] = [proc.returncode, last[:200]]
    return out


async def runtime_contract(ctx: Context) -> dict[str, Any]:
    task = conformance_env.env.tasks["echo"](text="hello")
    task = task.model_copy(update={"runtime_config": {"resources": {WORKER_LABEL: 1}}})
    runtime = RayRuntime(conformance_env.SOURCE, address=ctx.cluster.address)
    report = await check_runtime(runtime, task)
    return {"checks": report.checks, "notes": report.notes}


async def runtime_placement(ctx: Context) -> dict[str, Any]:
    seen: list[list[str]] = []
    urls: list[str] = []

    class Look(Echo):
        async def __call__(self, run: Run) -> None:
            assert run.client is not None
            urls.append(run.client.url)
            seen.append(listeners())  # while the environment's actor serves
            await super().__call__(run)

    runtime = RayRuntime(ENV_SOURCE, resources={"cpus": 0.5})
    on_a = where_rows(3, resources={HEAD_LABEL: 1})
    on_b = where_rows(3, resources={WORKER_LABEL: 1, "memory": "1m"})
    a = await on_a.run(Look(), runtime=runtime)
    b = await on_b.run(Look(), runtime=runtime)
    return {
        "a": [summary(r) for r in a.runs],
        "b": [summary(r) for r in b.runs],
        "listeners": sorted({addr for found in seen for addr in found}),
        "urls": urls,
    }


async def server_dies_mid_rollout(ctx: Context) -> dict[str, Any]:
    async def patient(run: Run) -> None:
        await asyncio.sleep(60)

    runtime = RayRuntime(ENV_SOURCE, address=ctx.cluster.address)
    t0 = time.monotonic()
    run = await rollout(Task(env="ray-where", id="doomed"), patient, runtime=runtime)
    assert run.error is not None
    return {
        "error": [run.error.phase, run.error.type, run.error.message],
        "seconds": time.monotonic() - t0,
    }


async def runtime_errors(ctx: Context) -> dict[str, Any]:
    missing = RayRuntime(ctx.scratch / "missing.py")
    infeasible = RayRuntime(ENV_SOURCE, resources={"nowhere": 1}, startup_timeout=1.0)
    out = {}
    for name, runtime in (("missing", missing), ("infeasible", infeasible)):
        job = await where_rows(1).run(Echo(), runtime=runtime)
        run = job.runs[0]
        assert run.error is not None
        out[name] = [run.error.phase, run.error.type, run.error.message]
    return out


async def failed_shutdown_hook(ctx: Context) -> dict[str, Any]:
    source = Path(__file__).parent.parent / "runtimes" / "teardown_env.py"
    runtime = RayRuntime(source, address=ctx.cluster.address)
    run = await rollout(Task(env="teardown-probe", id="answer"), Echo(), runtime=runtime)
    assert run.error is not None
    return {
        "reward": None if run.grade is None else run.grade.reward,
        "error": [run.error.phase, run.error.type, run.error.message],
    }


async def executor_streams(ctx: Context) -> dict[str, Any]:
    gate = board()
    order: list[int] = []

    def on_run(run: Run) -> None:
        order.append(run.task.args["i"])
        if run.task.args["i"] == 1:
            gate.open.remote()

    ex = RayExecutor(ctx.cluster.address)
    t0 = time.monotonic()
    job = await run_taskset(
        where_rows(12), FirstWaits(gate), runtime=LocalRuntime(ENV_SOURCE), executor=ex,
        on_run=on_run, max_concurrent=6,
    )  # fmt: skip
    return {
        "seconds": time.monotonic() - t0,
        "job_id": job.id,
        "run_job_ids": sorted({r.job_id for r in job.runs}),
        "runs": [summary(r) for r in job.runs],
        "order": order,
    }


async def executor_with_ray_runtime(ctx: Context) -> dict[str, Any]:
    runtime = RayRuntime(ENV_SOURCE, resources={WORKER_LABEL: 1})
    job = await where_rows(6).run(Echo(), runtime=runtime, executor="ray")
    return {"runs": [summary(r) for r in job.runs]}


async def executor_cancelled(ctx: Context) -> dict[str, Any]:
    posts, marks = board(), ctx.folder("cancel-env")
    rows = [conformance_env.env.tasks["echo"](text=f"t{i}", marker=str(marks)) for i in range(6)]
    job = asyncio.create_task(
        run_taskset(rows, HoldOn(posts, None), runtime=LocalRuntime(conformance_env.SOURCE),
                    executor=RayExecutor(shards=2), max_concurrent=4)
    )  # fmt: skip
    pids = sorted(set(await _before(posts.posts_when.remote(4), job)))
    job.cancel()
    try:
        await job
    except asyncio.CancelledError:
        cancelled = True
    else:
        cancelled = False
    await _exited(pids)
    return {
        "cancelled": cancelled,
        "shard_pids": pids,
        "alive": [p for p in pids if _alive(p)],
        "started": len(list(marks.glob("task-*.start"))),
        "closed": len(list(marks.glob("task-*.closed"))),
        "shutdowns": len(list(marks.glob("env-*.shutdown"))),
    }


async def shard_process_dies(ctx: Context) -> dict[str, Any]:
    posts = board()
    ex = RayExecutor(shards=1, resources={HEAD_LABEL: 1}, settle=0)
    job = asyncio.create_task(
        run_taskset(where_rows(6), HoldOn(posts, None), runtime=LocalRuntime(ENV_SOURCE),
                    executor=ex, max_concurrent=2)
    )  # fmt: skip
    pids = set(await _before(posts.posts_when.remote(2), job))
    for pid in pids:
        os.kill(pid, signal.SIGKILL)
    result = await asyncio.wait_for(job, 60)
    return {
        "pids": len(pids),
        "runs": [summary(r) for r in result.runs],
        "messages": [r.error.message for r in result.runs if r.error is not None],
    }


async def unpicklable_trace(ctx: Context) -> dict[str, Any]:
    class Locked(Echo):
        async def __call__(self, run: Run) -> None:
            run.trace.add("assistant", threading.Lock())
            await super().__call__(run)

    job = await where_rows(2).run(Locked(), runtime=LocalRuntime(ENV_SOURCE), executor="ray")
    return {
        "runs": [summary(r) for r in job.runs],
        "messages": [r.error.message for r in job.runs if r.error is not None],
    }


async def worker_node_dies(ctx: Context) -> dict[str, Any]:
    from ray.experimental import internal_kv

    posts = board()
    agent = HoldOn(posts, ctx.nodes[WORKER_LABEL])
    done: list[int] = []
    job = asyncio.create_task(
        run_taskset(where_rows(24), agent, runtime=LocalRuntime(ENV_SOURCE),
                    executor=RayExecutor(settle=0), max_concurrent=6,
                    on_run=lambda r: done.append(r.task.args["i"]))
    )  # fmt: skip
    await _before(posts.posts_when.remote(3), job)  # the worker's shard is full and blocked
    killed = ctx.cluster.kill_worker_node()
    t0 = time.monotonic()
    result = await asyncio.wait_for(job, 60)
    return {
        "recorded_left": internal_kv._internal_kv_list("proctor/phase/"),  # settle=0's
        "killed": len(killed),
        "seconds_after_kill": time.monotonic() - t0,
        "runs": [summary(r) for r in result.runs],
        "messages": [r.error.message for r in result.runs if r.error is not None],
        "delivered": len(done),
    }


async def reconcile_kills_batch_actors(ctx: Context) -> dict[str, Any]:
    """A batch's actors, named in its namespace, are found and killed by `reconcile`."""
    import ray
    from proctor.batch import BatchStore
    from proctor.batch._reconcile import reconcile

    out = ctx.folder("reconcile") / "out"
    runtime = {"kind": "ray", "address": ctx.cluster.address}
    gone = {"pid": 2**22 + 1, "start_time": 1, "host": socket.gethostname()}  # no such pid
    doc = {"name": "b", "batch_id": "rb1", "config": {"runtime": runtime}, "runner": gone}
    BatchStore.create(out, doc).close()
    task = Task(env="ray-where", id="where", args={"i": 0})
    async with RayRuntime(ENV_SOURCE, batch="rb1")(task):
        named = ray.util.list_named_actors(all_namespaces=True)
        first = await reconcile(out)
        left = ray.util.list_named_actors(all_namespaces=True)
    return {"named": named, "first": first, "left": left, "second": await reconcile(out)}


async def batch_on_ray(ctx: Context) -> dict[str, Any]:
    """A batch with `executor = "ray"`: a file-loaded agent shipped by value to shards,
    every rollout recorded in the output directory as it ends."""
    from proctor.batch import aexecute, list_rollouts

    folder = ctx.folder("batch")
    (folder / "agent.py").write_text(
        "from proctor import agent_from_fn\n\nsolve = agent_from_fn(lambda prompt: prompt)\n"
    )
    rows = [{"env": "ray-where", "id": "where", "args": {"i": i}} for i in range(6)]
    (folder / "tasks.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    config = {
        "taskset": {"source": "tasks.jsonl", "env_source": str(ENV_SOURCE)},
        "agents": [{"kind": "python", "agent": "agent.py:solve"}],
        "runtime": {"kind": "local", "trusted": True},
        "executor": {"kind": "ray", "address": ctx.cluster.address},
        "max_concurrent": 4,
        "expected_rollouts": 6,
    }
    (folder / "batch.json").write_text(json.dumps(config))
    result = await aexecute(folder / "batch.json", folder / "out")
    rows_out = list_rollouts(folder / "out", limit=None)
    return {
        "result": result.model_dump(mode="json", exclude={"plan"}),
        "plan": None if result.plan is None else [c.reason for c in result.plan.checks if not c.ok],
        "statuses": [r["status"] for r in rows_out],
        "rewards": [r["reward"] for r in rows_out],
    }


PEAK_AGENTS = """
import asyncio
import os
import time

LEDGER = os.path.join(os.path.dirname(__file__), "ledger")


def _note(mark):
    fd = os.open(LEDGER, os.O_WRONLY | os.O_APPEND | os.O_CREAT)
    try:
        os.write(fd, mark)
    finally:
        os.close(fd)


def _inside():
    with open(LEDGER, "rb") as f:
        data = f.read()
    return data.count(b"+") - data.count(b"-")


async def _held(run):
    _note(b"+")
    try:  # stay in until more than the bound are in, or a while has passed
        until = time.monotonic() + 1.5
        while _inside() <= 2 and time.monotonic() < until:
            await asyncio.sleep(0.02)
    finally:
        _note(b"-")
    run.trace.content = run.prompt


one = _held
two = _held
"""


async def batch_bound_across_agents(ctx: Context) -> dict[str, Any]:
    """A batch with two agents on Ray shards, `max_concurrent = 2`: every agent entering
    and leaving its rollout marks a shared ledger, whose running sum is the rollouts in
    flight at once."""
    from proctor.batch import aexecute

    folder = ctx.folder("bound")
    (folder / "agents.py").write_text(PEAK_AGENTS)
    rows = [{"env": "ray-where", "id": "where", "args": {"i": i}} for i in range(4)]
    (folder / "tasks.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    config = {
        "taskset": {"source": "tasks.jsonl", "env_source": str(ENV_SOURCE)},
        "agents": [
            {"kind": "python", "agent": "agents.py:one"},
            {"kind": "python", "agent": "agents.py:two"},
        ],
        "runtime": {"kind": "local", "trusted": True},
        "executor": {"kind": "ray", "address": ctx.cluster.address},
        "max_concurrent": 2,
        "expected_rollouts": 8,
    }
    (folder / "batch.json").write_text(json.dumps(config))
    result = await aexecute(folder / "batch.json", folder / "out")
    if result.plan is not None and not result.plan.ok:
        return {"plan": [c.reason for c in result.plan.checks if not c.ok]}
    inside = peak = 0
    for mark in (folder / "ledger").read_bytes():
        inside += 1 if mark == ord("+") else -1
        peak = max(peak, inside)
    return {"counts": result.counts, "peak": peak, "stopped": result.stopped}


async def batch_lease_resume(ctx: Context) -> dict[str, Any]:
    """A Ray-runtime batch killed -9 under a lease: `--resume` continues its rollouts."""
    return await lease_resume(ctx, ENV_SOURCE)


async def batch_lease_lapses(ctx: Context) -> dict[str, Any]:
    """A Ray-runtime batch killed -9 and never resumed: its actors go with the lease."""
    return await lease_lapses(ctx, ENV_SOURCE)


async def batch_lease_supervisor_killed(ctx: Context) -> dict[str, Any]:
    """A Ray-runtime batch's supervisor killed -9: its actors die with its Ray job."""
    return await lease_supervisor_killed(ctx, ENV_SOURCE)


async def executor_lease_resume(ctx: Context) -> dict[str, Any]:
    """A Ray-executor batch killed -9: `--resume` follows its shards' rollouts."""
    return await shards_resume(ctx, ENV_SOURCE)


async def executor_lease_lapses(ctx: Context) -> dict[str, Any]:
    """A Ray-executor batch killed -9, never resumed: the keeper kills its shards."""
    return await shards_lapse(ctx, ENV_SOURCE)


async def executor_keeper_killed(ctx: Context) -> dict[str, Any]:
    """A Ray-executor batch's keeper killed: its shards exit."""
    return await shards_keeper_killed(ctx, ENV_SOURCE)


SCENARIOS: list[Scenario] = [
    cluster_up,
    token_required,
    runtime_contract,
    runtime_placement,
    runtime_errors,
    server_dies_mid_rollout,
    failed_shutdown_hook,
    executor_streams,
    executor_with_ray_runtime,
    executor_cancelled,
    shard_process_dies,
    unpicklable_trace,
    reconcile_kills_batch_actors,
    batch_on_ray,
    batch_bound_across_agents,
    batch_lease_resume,
    batch_lease_lapses,
    batch_lease_supervisor_killed,
    executor_lease_resume,
    executor_lease_lapses,
    executor_keeper_killed,
    worker_node_dies,  # last: the cluster has one node after it
]


async def _before(waiting: Awaitable[Any], job: asyncio.Task[Any]) -> Any:
    """What `waiting` gives, failing if `job` ends first (or after 60 s)."""
    wait = asyncio.ensure_future(waiting)
    await asyncio.wait([wait, job], timeout=60, return_when=asyncio.FIRST_COMPLETED)
    if not wait.done():
        wait.cancel()
        if not job.done():
            raise AssertionError("the job did not get there: still running after 60 s")
        ended = job.result()
        errors = {r.error.message for r in ended.runs if r.error}
        raise AssertionError(f"the job did not get there: {ended!r} {errors}")
    return wait.result()


def _settle(future: asyncio.Future[None]) -> None:
    if not future.done():
        future.set_result(None)


async def _exited(pids: list[int], limit: float = 10.0) -> None:
    """Wait (up to `limit` seconds) until every process in `pids` has exited, via pidfds."""
    loop = asyncio.get_running_loop()
    watched: list[tuple[int, asyncio.Future[None]]] = []
    for pid in pids:
        try:
            fd = os.pidfd_open(pid)
        except ProcessLookupError:
            continue
        gone: asyncio.Future[None] = loop.create_future()
        loop.add_reader(fd, _settle, gone)
        watched.append((fd, gone))
    try:
        if watched:
            await asyncio.wait([gone for _, gone in watched], timeout=limit)
    finally:
        for fd, _ in watched:
            loop.remove_reader(fd)
            os.close(fd)


def _alive(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except OSError:
        return False
    return state != "Z"


async def main(out: Path, only: list[str]) -> dict[str, Any]:
    results: dict[str, Any] = {}
    t0 = time.monotonic()
    cluster = LocalCluster()
    out.with_suffix(".root").write_text(str(cluster.root))  # for cleanup, should we die
    try:
        nodes = cluster.wait_nodes()
        results["startup_seconds"] = time.monotonic() - t0
        ctx = Context(cluster, nodes, cluster.root / "scratch")
        ctx.scratch.mkdir()
        for scenario in SCENARIOS:
            if only and scenario.__name__ not in only:
                continue
            s0 = time.monotonic()
            try:
                outcome = {"ok": True, **await scenario(ctx)}
            except Exception:
                outcome = {"ok": False, "error": traceback.format_exc()}
            outcome["wall"] = time.monotonic() - s0
            results[scenario.__name__] = outcome
    except Exception:
        results["error"] = traceback.format_exc() + "\n" + cluster.logs()
    finally:
        cluster.close()
        results["total_seconds"] = time.monotonic() - t0
    return results


if __name__ == "__main__":
    loopback_up()
    out = Path(sys.argv[1])
    results = asyncio.run(main(out, sys.argv[2:]))
    out.write_text(json.dumps(results, indent=1, default=repr))
