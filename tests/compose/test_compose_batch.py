"""The inventory example through `proctor batch` (records, show, export); a killed
runner's projects removed by `proctor batch reconcile`, or adopted by `--resume`."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest

from proctor.batch import list_rollouts, read_events

HERE = Path(__file__).resolve().parent
EXAMPLE = HERE.parents[1] / "examples" / "compose"
PROCTOR = [sys.executable, "-m", "proctor.cli"]
pytestmark = [pytest.mark.slow, pytest.mark.timeout(300)]


def _labelled(kind: str, batch_id: str) -> list[str]:
    argv = ["podman", *kind.split(), "-q", f"--filter=label=proctor.batch={batch_id}"]
    return subprocess.run(argv, capture_output=True, text=True, check=True).stdout.split()


def _config(
    tmp_path: Path, image: str, options: dict[str, Any], agent: str, kind: str = "python"
) -> Path:
    runtime = {
        "kind": "compose",
        "file": str(EXAMPLE / "compose.yaml"),
        "source": "/app/env.py",
        "variables": {"PROCTOR_IMAGE": image},
        **options,
    }
    config = {
        "taskset": {"source": str(EXAMPLE / "tasks.py"), "env_source": str(EXAMPLE / "env.py")},
        "agents": [{"kind": kind, "agent": agent}],
        "runtime": runtime,
        "max_concurrent": 3,
        "expected_rollouts": 3,
        "timeouts": {"rollout": 200},
    }
    path = tmp_path / "batch.json"
    path.write_text(json.dumps(config))
    return path


def test_the_example_runs_as_a_batch_recorded_shown_and_exported(
    tmp_path: Path, image: str, options: dict[str, Any]
) -> None:
    config = _config(tmp_path, image, options, f"{EXAMPLE / 'tasks.py'}:clerk")
    out = tmp_path / "out"
    argv = [*PROCTOR, "batch", str(config), "--execute", "--output-dir", str(out), "--quiet"]
    done = subprocess.run(argv, capture_output=True, text=True, timeout=250)
    assert done.returncode == 0, (done.stdout, done.stderr)
    rows = list_rollouts(out, limit=None)
    assert [(r["status"], r["reward"]) for r in rows] == [("completed", 1.0)] * 3
    batch_id = json.loads((out / "batch.json").read_text())["batch_id"]
    assert _labelled("ps -a", batch_id) == [] and _labelled("network ls", batch_id) == []
    shown = subprocess.run([*PROCTOR, "show", str(out)], capture_output=True, text=True)
    assert shown.returncode == 0 and shown.stdout.count("completed") == 3, shown.stderr
    samples = tmp_path / "samples.jsonl"
    exported = subprocess.run(
        [*PROCTOR, "export", str(out), "-o", str(samples)], capture_output=True, text=True
    )
    assert exported.returncode == 0, exported.stderr
    assert samples.exists()


def test_reconcile_removes_the_projects_of_a_killed_runner(
    tmp_path: Path, image: str, options: dict[str, Any]
) -> None:
    config = _config(tmp_path, image, options, f"{HERE / 'slow_agent.py'}:waiter")
    out = tmp_path / "out"
    argv = [*PROCTOR, "batch", str(config), "--execute", "--output-dir", str(out), "--quiet"]
    runner = subprocess.Popen(argv, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        deadline = time.monotonic() + 200
        batch_id = None
        while True:  # every project up: a db and a main container each
            assert runner.poll() is None, "the runner ended before its agents waited"
            assert time.monotonic() < deadline, "the projects never came up"
            if batch_id is None and (out / "batch.json").exists():
                batch_id = json.loads((out / "batch.json").read_text())["batch_id"]
            if batch_id and len(_labelled("ps", batch_id)) == 6:
                break
            time.sleep(0.2)
        os.kill(runner.pid, signal.SIGKILL)
        runner.wait()
        assert len(_labelled("ps -a", batch_id)) == 6  # they outlived their runner
        assert len(_labelled("network ls", batch_id)) == 3
        done = subprocess.run(
            [*PROCTOR, "batch", "reconcile", str(out)], capture_output=True, text=True, timeout=120
        )
        assert done.returncode == 0, (done.stdout, done.stderr)
        assert _labelled("ps -a", batch_id) == [] and _labelled("network ls", batch_id) == []
    finally:
        if runner.poll() is None:
            runner.kill()
            runner.wait()
        subprocess.run([*PROCTOR, "batch", "reconcile", str(out)], capture_output=True, check=False)


def test_a_resumed_runner_adopts_the_projects_of_a_killed_one_and_removes_each_after(
    tmp_path: Path, image: str, options: dict[str, Any]
) -> None:
    config = _config(tmp_path, image, options, f"{HERE / 'slow_agent.py'}:Patient")
    out = tmp_path / "out"
    argv = [*PROCTOR, "batch", str(config), "--execute", "--output-dir", str(out), "--quiet"]
    runner = subprocess.Popen(argv, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        deadline = time.monotonic() + 200
        while not (out.exists() and _waiting(out)):  # every agent checkpointed and parked
            assert runner.poll() is None, "the runner ended before its agents waited"
            assert time.monotonic() < deadline, "the agents never reached their checkpoints"
            time.sleep(0.2)
        os.kill(runner.pid, signal.SIGKILL)
        runner.wait()
        batch_id = json.loads((out / "batch.json").read_text())["batch_id"]
        assert len(_labelled("ps", batch_id)) == 6  # running still, databases and all
        resume = subprocess.run(
            [*PROCTOR, "batch", "--resume", str(out), "--quiet"],
            capture_output=True, text=True, timeout=200,
        )  # fmt: skip
        assert resume.returncode == 0, (resume.stdout, resume.stderr)
        rows = list_rollouts(out, limit=None)
        # graded by what each project's database holds: the same database as before
        assert [(r["status"], r["reward"]) for r in rows] == [("completed", 1.0)] * 3
        events = read_events(out)
        assert sorted(e["id"] for e in events if e["type"] == "continued") == sorted(
            r["id"] for r in rows
        )
        assert _labelled("ps -a", batch_id) == [] and _labelled("network ls", batch_id) == []
    finally:
        if runner.poll() is None:
            runner.kill()
            runner.wait()
        subprocess.run([*PROCTOR, "batch", "reconcile", str(out)], capture_output=True, check=False)


def _waiting(out: Path) -> bool:
    folders = list((out / "rollouts").glob("*--Patient--r1"))
    return len(folders) == 3 and all(
        (f / "checkpoint.json").exists() and (f / "session.json").exists() for f in folders
    )
