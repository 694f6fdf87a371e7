"""Output directories for the dashboard's browser tests, and `proctor view` as a child.

Batches are real: `proctor.batch.aexecute` (or the `proctor batch` command) on a small
taskset in `tmp_path`, the way examples/batch/letters.toml runs the letters taskset; the
hostile rollout is written with `BatchStore` and `RolloutRecorder`, as a runner would.
(A uniquely named module, not `conftest`: other test folders have their own conftest.)
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import sys
import textwrap
from collections.abc import AsyncIterator
from dataclasses import dataclass
from pathlib import Path
from typing import IO, Any

from proctor.batch import BatchStore, aexecute, execute

ENV = """
from proctor import Environment, graders

mini = Environment("mini", version="1.0.0")


@mini.template
async def add(a: int, b: int):
    answer = yield f"What is {a} + {b}?"
    yield graders.numeric(answer, a + b)


@mini.template
async def score(value: float):
    yield f"Score {value}"
    yield value


@mini.template
async def broken():
    yield "Say anything"
    raise RuntimeError("grader boom")
"""

AGENTS = """
import asyncio
import re
from pathlib import Path

HERE = Path(__file__).parent


async def solver(run):
    numbers = re.findall(r"-?\\d+", run.prompt or "")
    run.answer = str(sum(int(n) for n in numbers))


async def waiter(run):
    (HERE / f"started-{run.slug}").write_text("")
    while not (HERE / "gate").exists():
        await asyncio.sleep(0.02)
    await solver(run)
"""


def add(a: int, b: int) -> dict[str, Any]:
    """A row asking for `a + b` (the solver gets it right: reward 1)."""
    return {"env": "mini", "id": "add", "args": {"a": a, "b": b}, "slug": f"add-{a}-{b}"}


def score(slug: str, value: float) -> dict[str, Any]:
    """A row whose reward is `value`, whatever the answer."""
    return {"env": "mini", "id": "score", "args": {"value": value}, "slug": slug}


BROKEN: dict[str, Any] = {"env": "mini", "id": "broken", "args": {}, "slug": "broken"}


def write_batch_config(
    root: Path, name: str, rows: list[dict[str, Any]], agent: dict[str, Any] | None = None
) -> Path:
    """Write the environment, agents, rows and a TOML config under `root`; the config."""
    root.mkdir(parents=True, exist_ok=True)
    (root / "env.py").write_text(textwrap.dedent(ENV))
    (root / "agents.py").write_text(textwrap.dedent(AGENTS))
    (root / "tasks.json").write_text(json.dumps(rows, indent=2))
    agent = agent or {"kind": "python", "agent": "agents.py:solver"}
    agent_lines = "\n".join(f"{key} = {json.dumps(value)}" for key, value in agent.items())
    config = root / f"{name}.toml"
    config.write_text(
        textwrap.dedent(f"""\
            name = "{name}"
            max_concurrent = 4
            expected_rollouts = {len(rows)}

            [taskset]
            source = "tasks.json"
            env_source = "env.py"

            [runtime]
            kind = "local"
            trusted = true

            [timeouts]
            rollout = 60

            [[agents]]
            """)
        + agent_lines
        + "\n"
    )
    return config


async def run_batch(root: Path, out: Path, rows: list[dict[str, Any]]) -> Path:
    """Execute a batch of `rows` with the solver agent into `out` (named `out.name`)."""
    result = await aexecute(write_batch_config(root, out.name, rows), out)
    assert result.launched, result
    return out


LETTERS = Path(__file__).resolve().parents[2] / "examples" / "letters"
TWO_AGENTS = """\
name = "two"
max_concurrent = 8
expected_rollouts = 48
repeats = 2

[taskset]
source = "tasks.py"

[runtime]
kind = "local"
trusted = true

[[agents]]
kind = "python"
agent = "solver.py:solver"

[[agents]]
kind = "python"
agent = "zero.py:zero"
"""


def letters_two_agents(work: Path) -> Path:
    """Run examples/letters with two agents, `solver` and `zero` (answers "0"), twice
    per task, into `work/runs/two`; that output directory."""
    for name in ("env.py", "solver.py", "tasks.py"):
        (work / name).write_bytes((LETTERS / name).read_bytes())
    (work / "zero.py").write_text("async def zero(run):\n    run.answer = '0'\n")
    (work / "two.toml").write_text(TWO_AGENTS)
    out = work / "runs" / "two"
    result = execute(work / "two.toml", out)
    assert result.counts == {"completed": 48}, result
    return out


HOSTILE_SCRIPT = "<script>window.__pwned=1</script>"
HOSTILE_IMG = '<img src=x onerror="window.__pwned=1">'
HOSTILE_LINK = "javascript:window.__pwned=1"
ANSI = "\x1b[31mred alert\x1b[0m"
HOSTILE = f"{HOSTILE_SCRIPT} {HOSTILE_IMG} {HOSTILE_LINK} {ANSI}"
LONG_LINE = "L" * 100_000
INVALID_UTF8 = b"bad bytes: \xff\xfe\xc3( end"


@dataclass(frozen=True)
class Assignment:
    """One planned rollout, as `BatchStore.begin` wants it."""

    rollout_id: str
    task: str
    agent: str | None = "evil"
    model: str | None = None
    repeat: int = 1


def hostile_batch(out: Path) -> str:
    """A batch of one failed rollout whose every text field is hostile; its id.

    Prompt, answer, a model turn, trace steps, the error (message and traceback) and
    the log hold script tags, an `onerror` image, a `javascript:` URL and ANSI escapes;
    the log also has invalid UTF-8 and a 100 KB line.
    """
    planned = Assignment("evil--evil--r1", "evil")
    with BatchStore.create(out, {"name": "hostile", "config": None}) as store:
        store.add_assignments([planned])
        rec = store.begin(planned, phase="agent")
        rec.update(prompt=HOSTILE)
        rec.append_turn(_turn(HOSTILE))
        for kind, content in (
            ("user", HOSTILE),
            ("tool_call", {"name": HOSTILE, "arguments": {"html": HOSTILE}}),
            ("tool_result", HOSTILE),
            ("assistant", HOSTILE),
        ):
            rec.append_step({"kind": kind, "content": content, "data": None})
        rec.log(f"{HOSTILE}\n{LONG_LINE}\n")
        with open(Path(rec.folder) / "log.txt", "ab") as log:  # what a harness may write
            log.write(INVALID_UTF8 + b"\n")
        error = {"phase": "agent", "type": "RuntimeError", "message": HOSTILE}
        rec.finish("failed", answer=HOSTILE, error={**error, "traceback": HOSTILE}, reward=None)
    return planned.rollout_id


def _turn(text: str) -> dict[str, Any]:
    message = {
        "role": "assistant",
        "content": text,
        "tool_calls": [
            {
                "id": "call_1",
                "type": "function",
                "function": {"name": "lookup", "arguments": json.dumps({"q": text})},
            }
        ],
    }
    return {
        "turn": 1,
        "api": "chat",
        "model": "evil-model",
        "status": 200,
        "error": None,
        "response": {"choices": [{"index": 0, "message": message, "finish_reason": "stop"}]},
        "usage": {"input_tokens": 3, "output_tokens": 4},
        "cost": 0.0,
        "attempts": [{"n": 1, "cause": "ok", "status": 200, "error": None}],
        "request_sha256": "0" * 64,
        "messages": 1,
    }


@dataclass
class View:
    """A running `proctor view`: its URL and the file its stderr goes to."""

    url: str
    stderr: Path

    def at(self, path: str) -> str:
        """The absolute URL of `path` (e.g. `/b/NAME`) on this server."""
        return self.url.rstrip("/") + path


@contextlib.asynccontextmanager
async def proctor_view(*outs: Path, log_dir: Path) -> AsyncIterator[View]:
    """Start `python -m proctor.cli view OUTS...`, yield once it prints its URL, stop it.

    SIGTERM in the end (the way a user stops it); the server must not leave a traceback.
    """
    stderr = log_dir / "proctor-view.err"
    with _log_file(stderr) as err:
        proc = await asyncio.create_subprocess_exec(
            sys.executable,
            "-m",
            "proctor.cli",
            "view",
            *map(str, outs),
            stdout=asyncio.subprocess.PIPE,
            stderr=err,
            env=_env(),
        )
    try:
        url = await _url_line(proc, stderr)
        yield View(url, stderr)
    finally:
        await _stop(proc)
    assert "Traceback" not in _read(stderr), _read(stderr)


async def _url_line(proc: asyncio.subprocess.Process, stderr: Path) -> str:
    assert proc.stdout is not None
    line = await asyncio.wait_for(proc.stdout.readline(), timeout=30)
    text = line.decode().strip()
    prefix = "PROCTOR_VIEW_URL="
    assert text.startswith(prefix + "http://127.0.0.1:"), (text, _read(stderr))
    return text.removeprefix(prefix)


async def _stop(proc: asyncio.subprocess.Process) -> None:
    if proc.returncode is None:
        proc.terminate()
        try:
            await asyncio.wait_for(proc.wait(), timeout=15)
        except TimeoutError:
            proc.kill()
            await proc.wait()


def _log_file(path: Path) -> IO[bytes]:
    return open(path, "wb")


def _read(path: Path) -> str:
    return path.read_text(errors="replace")


def _env() -> dict[str, str]:
    env = dict(os.environ)
    env.pop("PROCTOR_DEBUG", None)
    return env


@contextlib.asynccontextmanager
async def batch_child(config: Path, out: Path, log_dir: Path) -> AsyncIterator[Any]:
    """`python -m proctor.cli batch CONFIG --execute --output-dir OUT --quiet` running."""
    with _log_file(log_dir / "batch.err") as err:
        proc = await asyncio.create_subprocess_exec(
            sys.executable,
            "-m",
            "proctor.cli",
            "batch",
            str(config),
            "--execute",
            "--output-dir",
            str(out),
            "--quiet",
            stdout=asyncio.subprocess.DEVNULL,
            stderr=err,
            env=_env(),
        )
    try:
        yield proc
    finally:
        if proc.returncode is None:
            proc.kill()
            await proc.wait()


async def page_true(page: Any, expression: str, within: float = 30) -> None:
    """Wait until `expression` is truthy in the page. Not `page.wait_for_function`: given
    a string it polls through `eval`, which the dashboard's CSP (no 'unsafe-eval')
    refuses whenever the first check is false. The page offers no event to wait on."""
    async with asyncio.timeout(within):
        while not await page.evaluate(expression):  # noqa: ASYNC110 - polling the page
            await asyncio.sleep(0.05)
