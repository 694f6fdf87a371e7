"""`proctor batch --execute` prints exactly one `proctor.batch.result/1` document on
stdout: whatever the agents print goes to their rollouts' logs, and a runner that
cannot write (a full disk) or start still prints its result."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from exec_env import ROWS, config, workspace, write_config

from proctor.batch._agent_output import MAX_KEPT, Printed

PROCTOR = str(Path(sys.executable).with_name("proctor"))

AGENTS = """

import subprocess


async def chatty(run):
    print("chatty says", run.slug)
    print("and again", flush=True)
    subprocess.run(["echo", "its child says", run.slug], check=True)
    await solver(run)


async def filler(run):
    try:
        with open(os.environ["FILL"], "ab") as file:
            while True:
                file.write(b"x" * 65536)
                file.flush()
    except OSError:  # the disk is full
        pass
    await solver(run)
"""


def batch(tmp_path: Path, agent: str, **overrides: object) -> Path:
    workspace(tmp_path)
    with (tmp_path / "agents.py").open("a") as file:
        file.write(AGENTS)
    data = config(agents=[{"kind": "python", "agent": f"agents.py:{agent}"}], **overrides)
    return write_config(tmp_path, data)


def run_cli(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [PROCTOR, "batch", *args, "--quiet"],
        capture_output=True,
        text=True,
        timeout=180,
        env={**os.environ, **(env or {})},
    )


def one_document(stdout: str) -> dict[str, Any]:
    """The result, checking stdout holds it and nothing else."""
    doc, end = json.JSONDecoder().raw_decode(stdout)
    assert stdout[end:].strip() == "", stdout
    assert doc["format"] == "proctor.batch.result/1"
    return doc


def test_what_a_python_agent_prints_goes_to_its_rollouts_log(tmp_path: Path) -> None:
    cfg = batch(tmp_path, "chatty")
    out = tmp_path / "out"
    proc = run_cli(str(cfg), "--execute", "--output-dir", str(out))
    assert proc.returncode == 0, proc.stderr
    assert one_document(proc.stdout)["counts"] == {"completed": 3}
    for row in ROWS:
        log = (out / "rollouts" / f"{row['slug']}--chatty--r1" / "log.txt").read_text()
        assert log == f"chatty says {row['slug']}\nand again\n"
    assert "its child says add-1-2" in proc.stderr  # a child's own stdout: on stderr


def test_a_full_disk_still_prints_the_result(tmp_path: Path) -> None:
    if os.geteuid() != 0:
        pytest.skip("mounting a small tmpfs needs root")
    disk = tmp_path / "disk"
    disk.mkdir()
    mounted = subprocess.run(
        ["mount", "-t", "tmpfs", "-o", "size=2m", "tmpfs", str(disk)], capture_output=True
    )
    if mounted.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs: {mounted.stderr.decode().strip()}")
    try:
        cfg = batch(tmp_path, "filler", max_concurrent=1)
        proc = run_cli(
            str(cfg), "--execute", "--output-dir", str(disk / "out"), env={"FILL": str(disk / "f")}
        )
    finally:
        subprocess.run(["umount", "-l", str(disk)], check=True)
    assert proc.returncode == 1, proc.stderr
    doc = one_document(proc.stdout)
    assert doc["launched"] is True and doc["stopped"] == "error"
    assert "No space left on device" in str(doc["error"])
    assert "error: the runner stopped: OSError" in proc.stderr


def test_an_existing_output_dir_is_a_result_that_says_so(tmp_path: Path) -> None:
    cfg = write_config(workspace(tmp_path), config())
    (tmp_path / "out").mkdir()
    proc = run_cli(str(cfg), "--execute", "--output-dir", str(tmp_path / "out"))
    assert proc.returncode == 1
    doc = one_document(proc.stdout)
    assert doc["launched"] is False and doc["stopped"] == "error"
    assert "already exists" in str(doc["error"])


def test_a_flood_of_prints_is_cut_and_the_cut_is_said() -> None:
    printed = Printed()
    printed.add("x" * (MAX_KEPT - 1))
    printed.add("yz")
    printed.add("more")
    text = printed.text()
    assert text.startswith("x" * (MAX_KEPT - 1) + "y\n")
    assert text.endswith("[5 more characters printed, not kept]\n")
