"""What the command says when something is wrong: a refused plan's reasons on stderr,
a flag typo with the subcommand's usage, Ctrl-C while planning as one line."""

from __future__ import annotations

import json
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from cli_helpers import proctor, write

from _support.signals import default_sigint, sigint_once
from _support.waiting import wait_until


def test_a_config_error_names_the_failed_check_and_its_reasons_on_stderr(tmp_path: Path) -> None:
    bad = write(tmp_path / "bad.toml", "name = 1\n")
    result = proctor("batch", bad)
    assert result.returncode == 1
    lines = result.stderr.splitlines()
    assert lines[0] == (
        "plan: not ok (config; not run: count, credentials, environment, substrate, models, "
        "pricing)"
    )
    assert f"config: {bad}:1: name: Input should be a valid string" in lines
    assert f"config: {bad}:1: taskset: Field required" in lines
    checks = json.loads(result.stdout)["checks"]
    assert [c["skipped"] for c in checks] == [False] + [True] * 6


def test_a_missing_config_file_says_so_on_stderr(tmp_path: Path) -> None:
    result = proctor("batch", tmp_path / "missing.toml")
    assert result.returncode == 1
    assert result.stderr.splitlines()[1:] == [
        f"config: {tmp_path / 'missing.toml'}: No such file or directory"
    ]


@pytest.mark.parametrize(
    ("argv", "usage"),
    [
        (["batch", "--bogus"], "usage: proctor batch "),
        (["tasks", "diff", "a", "b", "--bogus"], "usage: proctor tasks diff "),
        (["show", "x", "--bogus"], "usage: proctor show "),
    ],
)
def test_a_flag_typo_shows_the_subcommands_usage(argv: list[str], usage: str) -> None:
    result = proctor(*argv)
    assert result.returncode == 2
    assert result.stderr.startswith(usage), result.stderr
    assert result.stderr.splitlines()[-1].endswith("error: unrecognized arguments: --bogus")


SLOW_ENV = """
import time
from pathlib import Path

from proctor import Environment, graders

Path(__file__).with_name("importing").touch()
time.sleep(60)  # planning imports this in a child: Ctrl-C comes meanwhile
slow = Environment("slow")


@slow.template
async def echo(text: str):
    answer = yield f"Say {text}"
    yield graders.exact(answer, text)
"""


def slow_batch(root: Path) -> Path:
    write(root / "env.py", SLOW_ENV)
    write(root / "agents.py", "async def solver(run):\n    run.answer = 'hi'\n")
    rows = [{"env": "slow", "id": "echo", "args": {"text": "hi"}, "slug": "echo-hi"}]
    (root / "tasks.json").write_text(json.dumps(rows))
    config = {
        "name": "slow",
        "taskset": {"source": "tasks.json", "env_source": "env.py"},
        "agents": [{"kind": "python", "agent": "agents.py:solver"}],
        "runtime": {"kind": "local", "trusted": True},
        "max_concurrent": 1,
        "expected_rollouts": 1,
    }
    return write(root / "batch.json", json.dumps(config))


@pytest.mark.parametrize("execute", [False, True], ids=["plan", "execute"])
@pytest.mark.parametrize("pause", [0.0, 0.3, 1.0])
def test_ctrl_c_while_planning_is_one_line_and_exit_130(
    tmp_path: Path, execute: bool, pause: float
) -> None:
    config = slow_batch(tmp_path)
    argv = [sys.executable, "-m", "proctor.cli", "batch", str(config)]
    if execute:
        argv += ["--execute", "--output-dir", str(tmp_path / "out"), "--quiet"]
    child = subprocess.Popen(
        argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, cwd=tmp_path,
        preexec_fn=default_sigint,
    )  # fmt: skip
    try:
        assert wait_until(lambda: (tmp_path / "importing").exists(), within=30)
        time.sleep(pause)  # several moments of the plan; any of them is the same to it
        child.send_signal(signal.SIGINT)
        _, stderr = child.communicate(timeout=30)
    finally:
        if child.poll() is None:
            child.kill()
            child.communicate()
    assert child.returncode == 130, stderr
    assert stderr.splitlines() == ["error: interrupted"], stderr
    assert not (tmp_path / "out").exists()


RUN_ENV = """
from proctor import Environment, graders

mini = Environment("mini")


@mini.template
async def echo(text: str):
    answer = yield f"Say {text}"
    yield graders.exact(answer, text)
"""

RUN_AGENT = """
import asyncio
from pathlib import Path


async def solver(run):
    text = (run.prompt or "").removeprefix("Say ")
    if text == "block":
        Path(__file__).with_name("blocked").touch()
        await asyncio.sleep(600)
    run.answer = text
"""


def run_workspace(root: Path, texts: list[str]) -> list[str]:
    """An environment, an agent that blocks on the row `block`, and rows: the argv."""
    write(root / "env.py", RUN_ENV)
    write(root / "agents.py", RUN_AGENT)
    rows = [{"env": "mini", "id": "echo", "args": {"text": t}, "slug": t} for t in texts]
    (root / "tasks.json").write_text(json.dumps(rows))
    return ["run", "tasks.json", "--env-source", "env.py", "--agent", "agents.py:solver",
            "--runtime", "local", "--no-record"]  # fmt: skip


def test_the_live_rate_and_the_summarys_are_one_number(tmp_path: Path) -> None:
    argv = run_workspace(tmp_path, [f"t{i}" for i in range(12)])
    result = proctor(*argv, cwd=tmp_path)
    assert result.returncode == 0, result.stderr
    live = [line for line in result.stderr.splitlines() if line.startswith("batch tasks: ")]
    live_rate = live[-1].split(" | ")[2].split("/s")[0]
    (timing,) = [line for line in result.stdout.splitlines() if " rollouts in " in line]
    assert timing.endswith(f"({live_rate}/s)"), (live[-1], timing)


def test_ctrl_c_of_run_prints_the_summary_of_what_ended(tmp_path: Path) -> None:
    argv = run_workspace(tmp_path, ["a", "b", "block"])
    child = subprocess.Popen(
        [sys.executable, "-m", "proctor.cli", *argv, "--max-concurrent", "1"],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, cwd=tmp_path,
        preexec_fn=default_sigint,
    )  # fmt: skip
    stdout, stderr = sigint_once(child, (tmp_path / "blocked").exists)
    assert child.returncode == 130, stderr
    assert stderr.splitlines()[-1] == "error: interrupted"
    lines = stdout.splitlines()
    assert lines[0] == "interrupted: the 2 rollout(s) that ended"
    total = next(line for line in lines if line.startswith("total"))
    assert total.split()[1:3] == ["2", "1.000"], stdout


def test_tasks_diff_shows_each_rows_template_and_args_cut_short(tmp_path: Path) -> None:
    def rows(*specs: tuple[str, str, dict[str, object]]) -> str:
        return json.dumps([{"env": "mini", "id": t, "args": a, "slug": s} for s, t, a in specs])

    long = "x" * 100
    a = write(
        tmp_path / "a.json", rows(("a", "echo", {"text": "a"}), ("b", "echo", {"text": long}))
    )
    b = write(tmp_path / "b.json", rows(("a", "echo", {"text": "z"}), ("c", "add", {"a": 1})))
    result = proctor("tasks", "diff", a, b)
    assert result.returncode == 1, result.stderr
    table = [line.split() for line in result.stdout.splitlines()]
    assert table[0] == ["action", "slug", "template", "args", "fields"]
    assert table[1] == ["create", "b", "mini/echo", '{"text":"' + "x" * 50 + "…"]
    assert table[2] == ["update", "a", "mini/echo", '{"text":"a"}', "args"]
    assert table[3] == ["delete", "c", "mini/add", '{"a":1}']
