"""`proctor run --model/--harness`: models and harnesses from the command line."""

from __future__ import annotations

import asyncio
import json
import os
import sys
from pathlib import Path
from typing import Any

from cli_helpers import REPO, assert_user_error, proctor, write

from proctor.testing import FakeModelServer, FakeRequest, Reply

HARNESS = REPO / "tests" / "proxy" / "harness.py"
SHELLFIX = REPO / "examples" / "shellfix"


async def run_cli(*args: str | Path, env: dict[str, str] | None = None) -> tuple[int, str, str]:
    """The real command in a child process, while this loop serves the fake model."""
    proc = await asyncio.create_subprocess_exec(
        sys.executable,
        "-m",
        "proctor.cli",
        *map(str, args),
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
        cwd=REPO,
        env=None if env is None else {**os.environ, **env},
    )
    try:
        out, err = await asyncio.wait_for(proc.communicate(), 120)
    finally:
        if proc.returncode is None:  # timed out or cancelled: never leave it running
            proc.kill()
            await proc.wait()
    assert proc.returncode is not None
    return proc.returncode, out.decode(), err.decode()


def words(tmp_path: Path) -> Path:
    return write(
        tmp_path / "words.py",
        """
        from proctor import Environment, Taskset

        env = Environment("words")

        @env.template
        async def say(word: str):
            answer = yield f"say {word}"
            yield 1.0 if word in str(answer) else 0.0

        tasks = Taskset("words", [say(word=w) for w in ("apple", "pear")])
        """,
    )


async def test_harness_behind_the_proxy_with_a_turn_budget(tmp_path: Path) -> None:
    source = words(tmp_path)
    out_file = tmp_path / "runs.jsonl"
    async with FakeModelServer() as fake:
        code, out, err = await run_cli(
            "run",
            source,
            "--harness",  # the driver's variables do not reach a harness: set them here
            f"env HARNESS_TURNS=4 {sys.executable} {HARNESS}",
            "--model",
            f"vllm/served-model@{fake.url}",
            "--max-turns",
            "2",
            "--output",
            out_file,
            "--json",
        )
        assert code == 0, err
        assert {r.model for r in fake.requests} == {"served-model"}  # pinned by --model
    summary = json.loads(out)
    assert summary["runs"] == 2 and summary["errors"] == 0
    # The summary says the budget stopped them and what they used.
    assert summary["stop_reasons"] == {"max_turns": 2}
    assert summary["usage"]["output_tokens"] > 0
    assert summary["agent"].startswith("CommandAgent") or "harness" in summary["agent"]
    rows = [json.loads(line) for line in out_file.read_text().splitlines()]
    for row in rows:
        assert row["stop_reason"] == "max_turns"
        assert row["usage"]["output_tokens"] > 0
        turns = [s for s in row["trace"]["steps"] if s["kind"] == "model_turn"]
        assert len(turns) == 2


async def test_the_summary_table_shows_budget_stops_and_tokens(tmp_path: Path) -> None:
    async with FakeModelServer() as fake:
        code, out, err = await run_cli(
            "run",
            words(tmp_path),
            "--harness",
            f"env HARNESS_TURNS=4 {sys.executable} {HARNESS}",
            "--model",
            f"vllm/served-model@{fake.url}",
            "--max-turns",
            "2",
        )
    assert code == 0, err
    assert "stopped by budget: max_turns 2" in out
    assert "tokens" in out.splitlines()[0]


async def test_harness_env_passes_named_variables_and_nothing_else(tmp_path: Path) -> None:
    source = words(tmp_path)
    out_file = tmp_path / "runs.jsonl"
    async with FakeModelServer() as fake:
        code, _, err = await run_cli(
            "run",
            source,
            "--harness",
            f"{sys.executable} {HARNESS}",
            "--harness-env",
            "HARNESS_TURNS",
            "--model",
            f"vllm/served-model@{fake.url}",
            "--output",
            out_file,
            env={"HARNESS_TURNS": "3", "OTHER_API_KEY": "sk-must-not-pass"},
        )
        assert code == 0, err
    rows = [json.loads(line) for line in out_file.read_text().splitlines()]
    for row in rows:  # the harness saw HARNESS_TURNS (3 turns) and no other key
        turns = [s for s in row["trace"]["steps"] if s["kind"] == "model_turn"]
        assert len(turns) == 3
        assert json.loads(row["trace"]["content"])["leaked"] == []
    assert "sk-must-not-pass" not in out_file.read_text()


async def test_model_alone_runs_the_tool_agent(tmp_path: Path) -> None:
    sys.path.insert(0, str(SHELLFIX))
    try:
        from policy import policy  # type: ignore[import-not-found]  # the example's model
    finally:
        sys.path.remove(str(SHELLFIX))
        for name in ("env", "policy"):  # generic names: leave no trace for other tests
            sys.modules.pop(name, None)

    def answer(request: FakeRequest) -> Reply:
        reply: Any = policy(request)
        return reply

    async with FakeModelServer(answer) as fake:
        code, out, err = await run_cli(
            "run", SHELLFIX / "tasks.py", "--model", f"vllm/fake@{fake.url}", "--json"
        )
    assert code == 0, err
    summary = json.loads(out)
    assert summary["errors"] == 0 and summary["mean_reward"] == 1.0


def test_model_option_mistakes_are_one_line_errors(tmp_path: Path) -> None:
    source = words(tmp_path)
    assert_user_error(proctor("run", source, "--harness", "true"), "--harness needs --model")
    assert_user_error(proctor("run", source, "--no-jail"), "apply to --harness")
    assert_user_error(proctor("run", source, "--harness-env", "X"), "apply to --harness")
    assert_user_error(
        proctor("run", source, "--model", "vllm/m@http://127.0.0.1:9/v1", "--agent", "x:y"),
        "--agent cannot be combined",
    )
    assert_user_error(proctor("run", source, "--model", "no-slash"), "--model")
    env_without_key = {k: v for k, v in os.environ.items() if k != "OPENAI_API_KEY"}
    result = proctor_env(env_without_key, "run", source, "--model", "openai/gpt-4.1-mini")
    assert_user_error(result, "set OPENAI_API_KEY")


def proctor_env(env: dict[str, str], *args: str | Path) -> Any:
    import subprocess

    return subprocess.run(
        [sys.executable, "-m", "proctor.cli", *map(str, args)],
        capture_output=True,
        text=True,
        timeout=60,
        cwd=REPO,
        env=env,
    )
