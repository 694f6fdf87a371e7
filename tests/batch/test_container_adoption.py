"""A container outlives a killed runner; the resumed runner adopts its parked session.

The runner (a CLI child) starts one container per rollout with podman; its agent saves
a checkpoint and waits. The test kills the runner with SIGKILL, checks the containers
are still there, and resumes: each rollout continues from its checkpoint in the same
container (a `continued` event), is graded, and its container is removed.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest

from proctor.batch import list_rollouts, read_events

HERE = Path(__file__).resolve().parent
PROCTOR = [sys.executable, "-m", "proctor.cli"]
RUNC = "/usr/sbin/runc"  # crun fails on these hosts' cgroups
pytestmark = pytest.mark.timeout(300)


@pytest.fixture(scope="module")
def image() -> str:
    if shutil.which("podman") is None:
        pytest.fail("podman is not installed; `make test` installs it (make sysdeps)")
    from proctor.runtimes._image import python_image

    return python_image(engine="podman")


def _containers(batch_id: str) -> list[str]:
    argv = ["podman", "ps", "-a", "-q", f"--filter=label=proctor.batch={batch_id}"]
    return subprocess.run(argv, capture_output=True, text=True, check=True).stdout.split()


def _config(tmp_path: Path, image: str) -> Path:
    rows = [{"env": "adoptable", "id": "job", "args": {"n": i}, "slug": f"job-{i}"} for i in (1, 2)]
    (tmp_path / "tasks.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    runtime = {
        "kind": "container",
        "image": image,
        "source": str(HERE / "adopt_env.py"),
        "engine": "podman",
        "mounts": [f"{HERE}:{HERE}:ro"],
    }
    if os.path.exists(RUNC):
        runtime["oci_runtime"] = RUNC
    config = {
        "taskset": {"source": "tasks.jsonl", "env_source": str(HERE / "adopt_env.py")},
        "agents": [{"kind": "python", "agent": f"{HERE / 'adopt_agent.py'}:Patient"}],
        "runtime": runtime,
        "max_concurrent": 2,
        "expected_rollouts": 2,
        "timeouts": {"rollout": 200},
    }
    path = tmp_path / "batch.json"
    path.write_text(json.dumps(config))
    return path


def _waiting(out: Path) -> bool:
    """Both rollouts are in the agent phase with a checkpoint and a parked-session file."""
    folders = [out / "rollouts" / f"job-{i}--Patient--r1" for i in (1, 2)]
    return all((f / "checkpoint.json").exists() and (f / "session.json").exists() for f in folders)


def test_a_resumed_runner_adopts_the_containers_of_a_killed_one(tmp_path: Path, image: str) -> None:
    short = Path("/tmp") / f"pa-{os.getpid()}"
    short.mkdir()
    env = {**os.environ, "TMPDIR": str(short)}  # Unix socket paths must stay short
    try:
        config = _config(tmp_path, image)
        out = tmp_path / "out"
        argv = [*PROCTOR, "batch", str(config), "--execute", "--output-dir", str(out), "--quiet"]
        runner = subprocess.Popen(argv, env=env, stdout=subprocess.DEVNULL)
        deadline = time.monotonic() + 120
        while not (out.exists() and _waiting(out)):
            assert runner.poll() is None, "the runner ended before its agents waited"
            assert time.monotonic() < deadline, "the agents never reached their checkpoints"
            time.sleep(0.1)
        runner.kill()
        runner.wait()
        batch_id = json.loads((out / "batch.json").read_text())["batch_id"]
        assert len(_containers(batch_id)) == 2  # they outlived their runner

        resume = subprocess.run(
            [*PROCTOR, "batch", "--resume", str(out), "--quiet"],
            env=env, capture_output=True, text=True, timeout=200,
        )  # fmt: skip
        happened = [e for e in read_events(out) if e["type"] not in ("assigned",)]
        assert resume.returncode == 0, (resume.stdout, resume.stderr, happened)
        rows = list_rollouts(out, limit=None)
        assert [(r["status"], r["reward"]) for r in rows] == [("completed", 1.0)] * 2
        continued = [e["id"] for e in read_events(out) if e["type"] == "continued"]
        assert sorted(continued) == [r["id"] for r in rows]
        assert _containers(batch_id) == []
        for r in rows:  # the resume token is gone with the rollout
            assert not (out / "rollouts" / r["id"] / "session.json").exists()
    finally:
        subprocess.run([*PROCTOR, "batch", "reconcile", str(tmp_path / "out")],
                       env=env, capture_output=True, check=False)  # fmt: skip
        shutil.rmtree(short, ignore_errors=True)
