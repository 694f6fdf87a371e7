"""Scenarios of a batch on `runtime.kind = "ray"` under a lease (`runtime.lease`): its
environment actors belong to the batch's lease supervisor (a Ray driver of its own),
so they outlive a runner killed -9 for the grace, a resuming runner continues their
rollouts, and nothing outlives the lease. Run by `ray_driver.py` on its cluster."""

from __future__ import annotations

import asyncio
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

from _support.supervisor import supervisor_pid

ROWS = 2
AGENT = """
import asyncio
import os

MARKS = os.path.join(os.path.dirname(os.path.abspath(__file__)), "marks")


class Patient:
    async def __call__(self, run):
        if run.restored is not None:  # continued on its parked session
            run.answer = run.prompt
            return
        run.save_checkpoint({"waiting": True})
        fd = os.open(MARKS, os.O_WRONLY | os.O_APPEND | os.O_CREAT)
        os.write(fd, b"waiting\\n")
        os.close(fd)
        await asyncio.sleep(120)  # the runner is killed meanwhile
        run.answer = "too late"
"""


SHARD_AGENT = """
import asyncio
import os

MARKS = os.path.join(os.path.dirname(os.path.abspath(__file__)), "marks")


class Slow:
    async def __call__(self, run):
        fd = os.open(MARKS, os.O_WRONLY | os.O_APPEND | os.O_CREAT)
        os.write(fd, b"waiting\\n")
        os.close(fd)
        with open(os.path.join(os.path.dirname(MARKS), "seconds")) as f:
            await asyncio.sleep(int(f.read()))
        run.answer = run.prompt
"""


def _batch(
    folder: Path, address: str, env_source: str, lease: float, executor: bool = False
) -> Path:
    """Under a lease: the Ray runtime's, or (`executor`) the Ray executor's."""
    (folder / "agent.py").write_text(SHARD_AGENT if executor else AGENT)
    if not (folder / "seconds").exists():
        (folder / "seconds").write_text("8")  # how long SHARD_AGENT waits
    rows = [{"env": "ray-where", "id": "where", "args": {"i": i}} for i in range(ROWS)]
    (folder / "tasks.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    config: dict[str, Any] = {
        "taskset": {"source": "tasks.jsonl", "env_source": env_source},
        "agents": [{"kind": "python", "agent": "agent.py:Patient"}],
        "runtime": {"kind": "ray", "address": address, "lease": lease},
        "max_concurrent": ROWS,
        "expected_rollouts": ROWS,
        "timeouts": {"rollout": 120},
    }
    if executor:
        config["agents"] = [{"kind": "python", "agent": "agent.py:Slow"}]
        config["runtime"] = {"kind": "local", "trusted": True}
        config["executor"] = {"kind": "ray", "address": address, "lease": lease}
    (folder / "batch.json").write_text(json.dumps(config))
    return folder / "batch.json"


def _actors(batch_id: str) -> list[str]:
    """The live actors named in the batch's namespace."""
    import ray
    from proctor.runtimes._ray import actor_namespace

    return [
        a["name"]
        for a in ray.util.list_named_actors(all_namespaces=True)
        if a["namespace"] == actor_namespace(batch_id)
    ]


def _until(check: Any, limit: float) -> Any:
    end = time.monotonic() + limit
    while time.monotonic() < end:
        value = check()
        if value:
            return value
        time.sleep(0.2)
    return check()


def _killed(
    folder: Path, address: str, env_source: str, lease: float, executor: bool = False
) -> tuple[Path, str]:
    """Start the batch, kill -9 its runner once every rollout waits in its agent."""
    config, out = _batch(folder, address, env_source, lease, executor), folder / "out"
    argv = [sys.executable, "-m", "proctor.cli", "batch", str(config), "--execute"]
    runner = subprocess.Popen([*argv, "--output-dir", str(out), "--quiet"], cwd=folder,
                              stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)  # fmt: skip
    marks = folder / "marks"
    waiting = _until(lambda: marks.exists() and marks.read_text().count("waiting") >= ROWS, 120)
    time.sleep(1.0)  # the checkpoints reached the store
    runner.kill()
    runner.wait()
    if not waiting:
        raise AssertionError("the rollouts never reached their agents")
    return out, json.loads((out / "batch.json").read_text())["batch_id"]


def _resume_within_the_grace(folder: Path, address: str, env_source: str) -> dict[str, Any]:
    from proctor.batch import list_rollouts, read_events

    out, batch_id = _killed(folder, address, env_source, lease=60)
    kept = _actors(batch_id)
    argv = [sys.executable, "-m", "proctor.cli", "batch", "--resume", str(out), "--quiet"]
    resume = subprocess.run(argv, cwd=folder, capture_output=True, text=True, timeout=180)
    rows = list_rollouts(out, limit=None)
    return {
        "kept": kept,
        "resume_rc": resume.returncode,
        "resume_err": resume.stderr[-2000:],
        "rows": [(r["status"], r["reward"]) for r in rows],
        "continued": sum(1 for ev in read_events(out) if ev.get("type") == "continued"),
        "left": [] if _until(lambda: not _actors(batch_id), 30) else _actors(batch_id),
    }


def _lapsed(folder: Path, address: str, env_source: str) -> dict[str, Any]:
    out, batch_id = _killed(folder, address, env_source, lease=3)
    kept = _actors(batch_id)
    t0 = time.monotonic()
    gone = _until(lambda: not _actors(batch_id), 60)
    return {
        "kept": kept,
        "gone_after": time.monotonic() - t0 if gone else None,
        "left": _actors(batch_id),
        "socket_left": (out / "supervisor.sock").exists(),
    }


def _supervisor_killed(folder: Path, address: str, env_source: str) -> dict[str, Any]:
    out, batch_id = _killed(folder, address, env_source, lease=60)
    kept = _actors(batch_id)
    os.kill(supervisor_pid(out), signal.SIGKILL)
    t0 = time.monotonic()
    gone = _until(lambda: not _actors(batch_id), 60)
    return {"kept": kept, "gone_after": time.monotonic() - t0 if gone else None}


async def lease_resume(ctx: Any, env_source: str) -> dict[str, Any]:
    """Kill -9 mid-agent under a 60 s lease, then `--resume`: every rollout continued."""
    folder = ctx.folder("lease-resume")
    address = ctx.cluster.address
    return await asyncio.to_thread(_resume_within_the_grace, folder, address, env_source)


async def lease_lapses(ctx: Any, env_source: str) -> dict[str, Any]:
    """Kill -9 mid-agent under a 3 s lease, no resume: the actors go with the lease."""
    folder = ctx.folder("lease-lapses")
    return await asyncio.to_thread(_lapsed, folder, ctx.cluster.address, env_source)


__all__ = [
    "lease_lapses",
    "lease_resume",
    "lease_supervisor_killed",
    "shards_keeper_killed",
    "shards_lapse",
    "shards_resume",
]


async def lease_supervisor_killed(ctx: Any, env_source: str) -> dict[str, Any]:
    """Kill -9 the runner, then the supervisor: its actors die with its Ray job."""
    folder = ctx.folder("lease-supervisor")
    return await asyncio.to_thread(_supervisor_killed, folder, ctx.cluster.address, env_source)


def _shards_resumed(folder: Path, address: str, env_source: str) -> dict[str, Any]:
    from proctor.batch import list_rollouts

    out, batch_id = _killed(folder, address, env_source, lease=60, executor=True)
    kept = _actors(batch_id)
    argv = [sys.executable, "-m", "proctor.cli", "batch", "--resume", str(out), "--quiet"]
    resume = subprocess.run(argv, cwd=folder, capture_output=True, text=True, timeout=180)
    rows = list_rollouts(out, limit=None)
    return {
        "kept": kept,
        "resume_rc": resume.returncode,
        "resume_err": resume.stderr[-2000:],
        "rows": [(r["status"], r["reward"]) for r in rows],
        "started": (folder / "marks").read_text().count("waiting"),
        "left": [] if _until(lambda: not _actors(batch_id), 30) else _actors(batch_id),
    }


def _shards_lapsed(folder: Path, address: str, env_source: str, kill_keeper: bool) -> Any:
    import ray
    from proctor.runtimes._ray import actor_namespace

    (folder / "seconds").write_text("120")  # still running when the lease ends
    lease = 60 if kill_keeper else 3
    _, batch_id = _killed(folder, address, env_source, lease=lease, executor=True)
    kept = _actors(batch_id)
    if kill_keeper:
        ray.kill(ray.get_actor("lease", namespace=actor_namespace(batch_id)))
    t0 = time.monotonic()
    gone = _until(lambda: not _actors(batch_id), 60)
    return {"kept": kept, "gone_after": time.monotonic() - t0 if gone else None}


async def shards_resume(ctx: Any, env_source: str) -> dict[str, Any]:
    """A Ray-executor batch killed -9 under a lease: `--resume` follows the rollouts
    its shards went on with, none started again."""
    folder = ctx.folder("shards-resume")
    return await asyncio.to_thread(_shards_resumed, folder, ctx.cluster.address, env_source)


async def shards_lapse(ctx: Any, env_source: str) -> dict[str, Any]:
    """Its lease lapses: the keeper kills the shards, then itself."""
    folder = ctx.folder("shards-lapse")
    address = ctx.cluster.address
    return await asyncio.to_thread(_shards_lapsed, folder, address, env_source, False)


async def shards_keeper_killed(ctx: Any, env_source: str) -> dict[str, Any]:
    """Its keeper killed: the shards see it gone and exit."""
    folder = ctx.folder("shards-keeper")
    address = ctx.cluster.address
    return await asyncio.to_thread(_shards_lapsed, folder, address, env_source, True)
