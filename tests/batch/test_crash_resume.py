"""kill -9 of the batch runner at random points, then `--resume` until it finishes.

The environment is served elsewhere (`proctor serve`, parking sessions when the
runner's connection drops) and the model is a fake server in its own process that
logs every request before answering. Over 20 trials, after the last resume and a
`proctor batch reconcile`:

- every rollout ended exactly once (one terminal `rollout` event per rollout);
- no model turn was charged twice (no request body twice in the server's log);
- no recorded line was lost (what a killed runner left in every JSONL file is a
  prefix of the final file, torn last line aside);
- nothing of a dead runner is left (no `proctor-*` temp folder of its pid).
"""

from __future__ import annotations

import json
import os
import random
import subprocess
import sys
import tempfile
from collections import Counter
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from proctor.batch import list_rollouts, read_events

HERE = Path(__file__).parent
PROCTOR = [sys.executable, "-m", "proctor.cli"]
TRIALS = 20
ROWS = 6
TOKEN = "crash-test-server-token-0123456789"
KEY = "sk-crash-test-key-0123456789"
pytestmark = pytest.mark.timeout(600)


def _env() -> dict[str, str]:
    return {**os.environ, "CRASH_TOKEN": TOKEN, "OPENAI_API_KEY": KEY, "PYTHONUNBUFFERED": "1"}


def _start(argv: list[str], prefix: str) -> tuple[subprocess.Popen[str], str]:
    proc = subprocess.Popen(argv, stdout=subprocess.PIPE, text=True, env=_env())
    assert proc.stdout is not None
    for line in proc.stdout:
        if line.startswith(prefix):
            return proc, line.strip()
    proc.kill()
    raise AssertionError(f"{argv} printed no {prefix!r} line")


@pytest.fixture(scope="module")
def servers(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, Any]]:
    folder = tmp_path_factory.mktemp("crash")
    log = folder / "requests.log"
    model, line = _start([sys.executable, str(HERE / "crash_model.py"), str(log)], "{")
    env, port_line = _start(
        [*PROCTOR, "serve", str(HERE / "crash_env.py"), "--token-env", "CRASH_TOKEN"],
        "PROCTOR_SERVE_PORT=",
    )
    try:
        yield {
            "model_url": json.loads(line)["url"],
            "env_url": f"tcp://127.0.0.1:{port_line.split('=', 1)[1]}",
            "log": log,
            "folder": folder,
        }
    finally:
        for proc in (model, env):
            proc.terminate()
            proc.wait(10)
            if proc.stdout is not None:
                proc.stdout.close()


def _config(servers: dict[str, Any], trial: int) -> Path:
    folder: Path = servers["folder"] / f"trial-{trial}"
    folder.mkdir()
    rows = [
        {"env": "crashy", "id": "job", "args": {"n": trial * 100 + i}, "slug": f"job-{i}"}
        for i in range(ROWS)
    ]
    (folder / "tasks.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    config = {
        "name": f"crash-{trial}",
        "taskset": {"source": "tasks.jsonl", "env_source": str(HERE / "crash_env.py")},
        "agents": [
            {
                "kind": "tool",
                "name": "fake",
                "model": f"openai/gpt-4.1-mini@{servers['model_url']}",
                "max_steps": 4,
            }
        ],
        "runtime": {"kind": "url", "url": servers["env_url"], "token_env": "CRASH_TOKEN"},
        "max_concurrent": 3,
        "expected_rollouts": ROWS,
        "timeouts": {"rollout": 60},
    }
    path = folder / "batch.json"
    path.write_text(json.dumps(config))
    return path


def _run_and_maybe_kill(argv: list[str], rng: random.Random, kill: bool) -> int | None:
    """Run a runner; SIGKILL it after a random delay if `kill`. Its exit code, or None."""
    with tempfile.TemporaryFile() as err:
        proc = subprocess.Popen(argv, stdout=subprocess.DEVNULL, stderr=err, env=_env())
        if kill:
            try:
                proc.wait(rng.uniform(0.2, 2.5))
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()
                return None
        try:
            code = proc.wait(120)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
            raise
        err.seek(0)
        assert code in (0, 1), f"{argv} exited {code}: {err.read().decode(errors='replace')}"
    return code


def _snapshot(out: Path) -> dict[Path, bytes]:
    """Every JSONL file's complete lines, as a killed runner left them."""
    found = {}
    for path in out.rglob("*.jsonl"):
        data = path.read_bytes()
        found[path.relative_to(out)] = data[: data.rfind(b"\n") + 1]
    return found


def _runner_pids(out: Path) -> set[int]:
    return {ev["pid"] for ev in read_events(out) if ev.get("type") == "runner"}


def _leftovers(pids: set[int]) -> list[str]:
    tmp = Path(tempfile.gettempdir())
    return [
        p.name
        for p in tmp.glob("proctor-*")
        if any(f"-{pid}-" in p.name for pid in pids) and p.is_dir()
    ]


def test_kill_9_at_random_points_then_resume(servers: dict[str, Any]) -> None:
    rng = random.Random(20261201)
    adopted = interrupted = 0
    for trial in range(TRIALS):
        config = _config(servers, trial)
        out = config.parent / "out"
        execute = [*PROCTOR, "batch", str(config), "--execute", "--output-dir", str(out)]
        execute += ["--skip-model-check", "--quiet"]
        code = _run_and_maybe_kill(execute, rng, kill=True)
        kept: list[dict[Path, bytes]] = []
        resumes = 0
        while code is None:
            if not out.exists():  # killed before the output directory was made
                code = _run_and_maybe_kill(execute, rng, kill=rng.random() < 0.5)
                continue
            kept.append(_snapshot(out))
            resumes += 1
            resume = [*PROCTOR, "batch", "--resume", str(out), "--quiet"]
            code = _run_and_maybe_kill(resume, rng, kill=resumes < 3 and rng.random() < 0.5)
        subprocess.run([*PROCTOR, "batch", "reconcile", str(out)], check=True, env=_env(),
                       stdout=subprocess.DEVNULL)  # fmt: skip

        rows = list_rollouts(out, limit=None)
        assert len(rows) == ROWS
        assert all(r["status"] in ("completed", "interrupted") for r in rows), rows
        ended = Counter(
            ev["id"]
            for ev in read_events(out)
            if ev.get("type") == "rollout"
            and ev.get("status") in ("completed", "failed", "interrupted")
        )
        assert ended == Counter({r["id"]: 1 for r in rows}), f"trial {trial}: {ended}"
        for snapshot in kept:
            for path, data in snapshot.items():
                now = (out / path).read_bytes()
                assert now.startswith(data), f"trial {trial}: {path} lost recorded lines"
        assert _leftovers(_runner_pids(out)) == [], f"trial {trial}"
        for r in rows:
            if r["status"] == "completed":
                assert r["reward"] == 1.0, r
        interrupted += sum(r["status"] == "interrupted" for r in rows)
        adopted += sum(ev.get("type") == "continued" for ev in read_events(out))

    digests = Counter(servers["log"].read_text().split())
    twice = {d: n for d, n in digests.items() if n > 1}
    assert twice == {}, f"{len(twice)} model turns were sent more than once"
    print(f"\n{TRIALS} trials: {interrupted} rollouts interrupted, {adopted} continued")


def test_a_killed_runner_leaves_nothing_to_redo_after_completion(
    servers: dict[str, Any],
) -> None:
    """Resume of a finished batch launches nothing and sends no model request."""
    config = _config(servers, 99)
    out = config.parent / "out"
    execute = [*PROCTOR, "batch", str(config), "--execute", "--output-dir", str(out)]
    assert (
        _run_and_maybe_kill([*execute, "--skip-model-check", "--quiet"], random.Random(), False)
        == 0
    )
    before = servers["log"].read_text().count("\n")
    resume = subprocess.run(
        [*PROCTOR, "batch", "--resume", str(out), "--quiet"], capture_output=True, text=True,
        env=_env(), check=True,
    )  # fmt: skip
    assert json.loads(resume.stdout)["ran"] == 0
    assert servers["log"].read_text().count("\n") == before
