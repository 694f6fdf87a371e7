"""Harbor task directories from the command line: `proctor run` and `proctor validate
--oracle` take the folder like any task file and run it in its own image."""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

AGENT = """
from proctor.env import ShellClient


async def solve(run):
    await ShellClient(run.binding("shell").url).run("echo hello > answer.txt")
    run.answer = ""
"""


def _proctor(*args: str | Path, cwd: Path) -> subprocess.CompletedProcess[str]:
    env = dict(os.environ)
    conf = cwd / "containers.conf"  # crun fails on these hosts' cgroups: podman takes runc
    conf.write_text('[engine]\nruntime = "runc"\n')
    env["CONTAINERS_CONF"] = str(conf)
    return subprocess.run(
        [sys.executable, "-m", "proctor.cli", *map(str, args)],
        capture_output=True, text=True, timeout=600, cwd=cwd, env=env, check=False,
    )  # fmt: skip


def test_proctor_run_and_validate_take_a_harbor_folder(
    make_task: Callable[..., Path], base_image: str, tmp_path: Path
) -> None:
    make_task("hello", base_image)
    folder = make_task("again", base_image).parent
    (tmp_path / "agent.py").write_text(AGENT)
    ran = _proctor(
        "run", folder, "--agent", "agent.py:solve", "--json", "--no-record", cwd=tmp_path
    )
    assert ran.returncode == 0, ran.stderr
    assert '"mean_reward": 1.0' in ran.stdout and '"runs": 2' in ran.stdout
    checked = _proctor("validate", folder, "--oracle", "--json", cwd=tmp_path)
    assert checked.returncode == 0, checked.stdout + checked.stderr
    assert '"broken": 0' in checked.stdout
