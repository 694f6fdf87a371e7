"""The plan's size: assignments counted, not built, above `max_rollouts` (an absurd
`repeats` is refused at once, in bounded memory), and planning stays interruptible."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from plan_helpers import config, workspace, write_json

from proctor.batch._plan import aplan

HUGE_TOML = """\
max_concurrent = 2
expected_rollouts = 3
repeats = 1e7
[taskset]
source = "tasks.json"
env_source = "env.py"
[[agents]]
kind = "python"
agent = "env.py:solver"
"""
PROCTOR = str(Path(sys.executable).with_name("proctor"))
DEADLINE = 60.0  # seconds; generous on a loaded machine


@pytest.fixture(autouse=True)
def no_provider_keys(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("OPENAI_API_KEY", raising=False)


async def test_more_assignments_than_max_rollouts_are_counted_never_built(tmp_path: Path) -> None:
    workspace(tmp_path)
    data = config(repeats=10_000_000, expected_rollouts=30_000_000)
    plan = await aplan(write_json(tmp_path, data), skip_model_check=True)
    count = plan.check("count")
    assert not plan.ok and not count.ok
    assert count.reason.startswith(
        "30,000,000 assignments (3 tasks x 1 agent entries x 10,000,000 repeats) exceed "
        "max_rollouts (1,000,000)"
    )
    assert plan.rollouts == {"total": 30_000_000, "enabled": 30_000_000, "expected": 30_000_000}
    assert plan.assignments == []
    assert plan.check("config").ok and "not built" in plan.check("config").reason


async def test_max_rollouts_is_the_configs_to_set(tmp_path: Path) -> None:
    workspace(tmp_path)
    six = {"repeats": 2, "expected_rollouts": 6}
    small = await aplan(write_json(tmp_path, config(**six, max_rollouts=5)))
    assert "exceed max_rollouts (5)" in small.check("count").reason
    fits = await aplan(write_json(tmp_path, config(**six, max_rollouts=6)))
    assert fits.ok and len(fits.assignments) == 6


def _wait(proc: subprocess.Popen[bytes]) -> tuple[int, int]:
    """The exit status and peak resident KiB of `proc`, waiting at most DEADLINE.

    The peak is the program's own high-water mark (VmHWM), read while it runs: the
    rusage's ru_maxrss would count the forked copy of this test process (pytest at
    hundreds of MB) before the exec."""
    deadline = time.monotonic() + DEADLINE
    peak = 0
    while time.monotonic() < deadline:
        peak = max(peak, _status_kib(proc.pid, "VmHWM:"))
        pid, status, _ = os.wait4(proc.pid, os.WNOHANG)
        if pid:
            proc.returncode = os.waitstatus_to_exitcode(status)
            return proc.returncode, peak
        time.sleep(0.02)
    proc.kill()
    proc.wait()
    raise AssertionError(f"proctor batch still running after {DEADLINE:g}s")


def test_an_absurd_repeats_is_refused_in_bounded_memory_and_sigterm_is_heard(
    tmp_path: Path,
) -> None:
    workspace(tmp_path)
    (tmp_path / "huge.toml").write_text(HUGE_TOML)
    argv = [PROCTOR, "batch", "huge.toml", "--skip-model-check"]
    with (tmp_path / "out.json").open("wb") as stdout:
        proc = subprocess.Popen(argv, cwd=tmp_path, stdout=stdout, stderr=subprocess.DEVNULL)
        time.sleep(1.0)
        os.kill(proc.pid, signal.SIGTERM)  # not proc.send_signal: it would reap an exited one
        code, peak_kib = _wait(proc)
    out = (tmp_path / "out.json").read_bytes()
    # refused, or terminated while loading the taskset (143), or before the interpreter
    # had installed its handler at all (-15, on a loaded machine): it stopped, built nothing
    assert code in (1, 143, -signal.SIGTERM), code
    assert peak_kib < 300 * 1024, f"{peak_kib} KiB"  # it was 3 GiB and counting
    if code == 1:
        plan = json.loads(out)
        assert (
            "exceed max_rollouts"
            in next(c for c in plan["checks"] if c["name"] == "count")["reason"]
        )


def _rss_kib(pid: int) -> int:
    return _status_kib(pid, "VmRSS:")


def _status_kib(pid: int, field: str) -> int:
    try:
        with open(f"/proc/{pid}/status") as status:
            for line in status:
                if line.startswith(field):
                    return int(line.split()[1])
    except (OSError, ValueError, IndexError):
        pass
    return 0


def test_sigterm_stops_a_plan_while_it_builds_a_large_table(tmp_path: Path) -> None:
    """A plan allowed a large table (max_rollouts raised) still stops at SIGTERM: the
    table is built with a yield to the event loop every 10,000 assignments."""
    workspace(tmp_path)
    data = config(repeats=3_000_000, expected_rollouts=9_000_000, max_rollouts=10_000_000)
    write_json(tmp_path, data)
    argv = [PROCTOR, "batch", "batch.json", "--skip-model-check"]
    proc = subprocess.Popen(argv, cwd=tmp_path, stdout=subprocess.DEVNULL)
    deadline = time.monotonic() + DEADLINE
    while _rss_kib(proc.pid) < 120 * 1024:  # building: the table is growing
        assert proc.returncode is None and time.monotonic() < deadline, "never built a table"
        time.sleep(0.02)
    os.kill(proc.pid, signal.SIGTERM)
    code, peak_kib = _wait(proc)
    assert code == 143, code
    assert peak_kib < 1024 * 1024, f"{peak_kib} KiB"  # 9 million would be about 2 GiB
