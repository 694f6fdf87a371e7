"""Helpers for the CLI tests: every test runs the real command in a child process.

(A uniquely named module, not `conftest`: other test folders have their own conftest.)
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
from dataclasses import dataclass
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
LETTERS = REPO / "examples" / "letters"
SOLVER = f"{LETTERS / 'solver.py'}:solver"


def proctor(
    *args: str | Path, stdin: str | None = None, timeout: float = 60, cwd: Path = REPO
) -> subprocess.CompletedProcess[str]:
    """Run `python -m proctor.cli ARGS` to completion and capture its output."""
    return subprocess.run(
        [sys.executable, "-m", "proctor.cli", *map(str, args)],
        input=stdin,
        capture_output=True,
        text=True,
        timeout=timeout,
        cwd=cwd,
        env=_env(),
    )


def _env() -> dict[str, str]:
    env = dict(os.environ)
    env.pop("PROCTOR_DEBUG", None)
    return env


def assert_user_error(
    result: subprocess.CompletedProcess[str], *needles: str, code: int = 1
) -> str:
    """The command failed with exactly one `error: ...` line and no traceback."""
    assert result.returncode == code, (result.returncode, result.stdout, result.stderr)
    assert "Traceback" not in result.stderr, result.stderr
    lines = result.stderr.splitlines()
    assert len(lines) == 1, result.stderr
    assert lines[0].startswith("error: "), result.stderr
    for needle in needles:
        assert needle in lines[0], (needle, lines[0])
    return lines[0]


def write(path: Path, text: str) -> Path:
    path.write_text(textwrap.dedent(text).lstrip())
    return path


@dataclass
class Served:
    """A `proctor serve` child and its address."""

    proc: subprocess.Popen[str]
    port: int
    first_line: str

    @property
    def url(self) -> str:
        return f"tcp://127.0.0.1:{self.port}"

    def stop(self) -> tuple[int, str]:
        """SIGTERM, wait, and return (exit code, stderr)."""
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
        try:
            _, err = self.proc.communicate(timeout=15)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            _, err = self.proc.communicate()
        return self.proc.returncode, err


def serve(*args: str | Path) -> Served:
    """Start `proctor serve ARGS` and wait for its port line."""
    proc = subprocess.Popen(
        [sys.executable, "-m", "proctor.cli", "serve", *map(str, args)],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        cwd=REPO,
        env=_env(),
    )
    assert proc.stdout is not None
    line = proc.stdout.readline()
    if not line.startswith("PROCTOR_SERVE_PORT="):
        proc.kill()
        _, err = proc.communicate()
        raise AssertionError(f"no port line: {line!r}; stderr: {err}")
    return Served(proc, int(line.removeprefix("PROCTOR_SERVE_PORT=")), line)
