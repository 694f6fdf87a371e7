"""The `harbor` environment, served inside a Harbor task's own container.

`HarborRuntime` runs `python -m proctor.serve` on this file in the task's image. The
agent acts through the `shell` capability (commands run in the container, in the
image's working directory, with the image's environment variables). After the agent,
the row's test files are written to `/tests` and `bash /tests/test.sh` runs in the
same container, as Harbor runs it; the reward is what it wrote to
`/logs/verifier/reward.txt` (one number) or `/logs/verifier/reward.json` (its
`reward` entry, else the mean of its numbers).

Imports are absolute: the server loads this file by path.
"""

from __future__ import annotations

import base64
import json
import math
import os
import shutil
from collections.abc import AsyncGenerator, Mapping
from pathlib import Path
from typing import Any

from proctor.env import Environment, ShellResult
from proctor.records import Grade

__all__ = ["env", "run_solution", "solve", "verify"]

TESTS = Path("/tests")
SOLUTION = Path("/solution")
LOGS = Path("/logs")
VERIFIER_LOGS = LOGS / "verifier"
_SOLVE_TIMEOUT = 3600.0  # seconds solve.sh may take (Harbor bounds it by the agent's)
_TAIL = 4000  # characters of test.sh's output kept in the grade's info


def _image_environment() -> dict[str, str]:
    """The container's variables (the image's `ENV`: what Harbor's `exec` gives the
    agent and the tests), less proctor's own (`PROCTOR_TOKEN` is a secret)."""
    return {k: v for k, v in os.environ.items() if not k.startswith(("PROCTOR_", "HUD_"))}


env = Environment("harbor")
shell = env.add_shell(env=_image_environment())


async def solve(task: Any) -> str:
    """The reference solution (`tasks.solve`, `proctor validate --oracle`): solve.sh."""
    return await run_solution(task.args.get("solution"), task.args.get("solution_env"))


@env.template(id="harbor", solution=solve)
async def harbor(
    instruction: str,
    tests: dict[str, Any],
    solution: dict[str, Any] | None = None,
    verifier_timeout: float = 600.0,
    oracle: bool = False,
    verifier_env: dict[str, str] | None = None,
    solution_env: dict[str, str] | None = None,
) -> AsyncGenerator[Any, Any]:
    """A Harbor task: its instruction, then its tests' reward."""
    if oracle:
        await run_solution(solution, solution_env)
    yield instruction
    yield await verify(tests, verifier_timeout, verifier_env)


async def run_solution(
    solution: dict[str, Any] | None, variables: Mapping[str, str] | None = None
) -> str:
    """Write the solution files to /solution and run `bash /solution/solve.sh`, with
    `variables` (`[solution] env`) added to its environment.

    Returns:
        What solve.sh printed (its exit status does not matter: the tests judge).

    Raises:
        ValueError: the row carries no solution.
    """
    if not solution:
        raise ValueError("harbor: this task has no solution/solve.sh")
    _write_tree(SOLUTION, solution)
    command = f"bash {SOLUTION}/solve.sh"
    result = await shell.run(command, timeout=_SOLVE_TIMEOUT, env=variables)
    return result.stdout


async def verify(
    tests: Mapping[str, Any], seconds: float, variables: Mapping[str, str] | None = None
) -> Grade:
    """Run tests/test.sh in this container, with `variables` (`[verifier] env`) added
    to its environment, and read the reward file it wrote.

    Raises:
        TimeoutError: test.sh ran past `seconds`.
        RuntimeError: test.sh wrote no reward file, or one that does not parse.
    """
    _write_tree(TESTS, tests)
    VERIFIER_LOGS.mkdir(parents=True, exist_ok=True)
    for name in ("reward.txt", "reward.json"):  # the agent's own, if it left one
        (VERIFIER_LOGS / name).unlink(missing_ok=True)
    result = await shell.run(f"bash {TESTS}/test.sh", timeout=seconds, env=variables)
    if result.timed_out:
        raise TimeoutError(f"harbor: tests/test.sh ran past {seconds:g}s")
    rewards = _rewards(result)
    info = {
        "exit_code": result.exit_code,
        "stdout": result.stdout[-_TAIL:],
        "stderr": result.stderr[-_TAIL:],
        "rewards": rewards,
    }
    return Grade(reward=_score(rewards), info=info)


def _rewards(result: ShellResult) -> dict[str, float]:
    """The reward file's numbers by name (`reward` for reward.txt)."""
    text_file, json_file = VERIFIER_LOGS / "reward.txt", VERIFIER_LOGS / "reward.json"
    try:
        if text_file.is_file():
            return {"reward": float(text_file.read_text().strip())}
        if json_file.is_file():
            data = json.loads(json_file.read_text())
            return {k: float(v) for k, v in data.items() if _is_number(v)}
    except (ValueError, AttributeError) as exc:
        raise RuntimeError(f"harbor: the reward file does not parse: {exc}") from None
    raise RuntimeError(
        f"harbor: tests/test.sh (exit {result.exit_code}) wrote no {text_file} or "
        f"{json_file}: {(result.stderr or result.stdout)[-500:]}"
    )


def _score(rewards: dict[str, float]) -> float:
    if "reward" in rewards:
        return rewards["reward"]
    if not rewards:
        raise RuntimeError("harbor: reward.json holds no number")
    return math.fsum(rewards.values()) / len(rewards)


def _is_number(value: Any) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool)


def _write_tree(root: Path, files: Mapping[str, Any]) -> None:
    """Fill `root` with `files` only (relative path -> text or `{"text"|"base64", "mode"}`)."""
    root.mkdir(parents=True, exist_ok=True)
    for old in root.iterdir():  # the folder stays: `/` may not be writable
        if old.is_dir() and not old.is_symlink():
            shutil.rmtree(old)
        else:
            old.unlink()
    for rel, content in files.items():
        target = (root / rel).resolve()
        if not target.is_relative_to(root):
            raise ValueError(f"harbor: file {rel!r} is outside {root}")
        target.parent.mkdir(parents=True, exist_ok=True)
        if isinstance(content, str):
            target.write_text(content)
            continue
        data = content.get("text")
        target.write_bytes(
            data.encode() if data is not None else base64.b64decode(content["base64"])
        )
        target.chmod(int(content.get("mode", 0o644)))
