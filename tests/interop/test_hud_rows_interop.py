"""HUD task files and HUD prompts, against HUD itself (hud==0.6.21 in the peers venv).

Files HUD's `Taskset.to_file` writes load in proctor with HUD's slugs and are written
back byte for byte; files proctor writes load in HUD with the same slugs and HUD writes
them back identically. A proctor environment whose prompt is a list of MCP
`PromptMessage`s (HUD's prompt type), served by `python -m proctor.serve` under the
peers interpreter, is read by HUD's own client as HUD's server would send it.
"""

from __future__ import annotations

import json
import subprocess
import textwrap
from pathlib import Path
from typing import Any

import pytest

from proctor.records import Task
from proctor.tasks import Taskset

pytestmark = pytest.mark.hud

RESULT = "RESULT="

HUD_WRITER = """
import json, sys
from pathlib import Path
from hud.eval import Task, Taskset

out = Path(sys.argv[1])
(out / "env").mkdir()
(out / "env" / "compose.yaml").write_text("services:\\n  main:\\n    image: x\\n")
nested = {"b": [1, None, True], "a": "x"}
rows = [
    Task(env="coding", id="fix_bug", args={"repo": "d\\u00e9mo \\u2713", "level": 3,
         "ratio": 0.1, "tiny": 1e-07, "big": 2**70, "nested": nested}),
    Task(env="coding", id="plain"),
    Task(env="coding", id="custom", args={"n": 1}, slug="my-slug",
         validation=[{"name": "submit", "arguments": {"answer": "x"}}],
         agent_config={"system_prompt": "Be brief.", "max_steps": 20},
         columns={"difficulty": "hard", "tags": ["a", "b"]},
         runtime_config={"image": "coding-env:latest",
                         "resources": {"cpu": 2, "memory_mb": 4096, "gpu": {"type": "a100"}},
                         "limits": {"run_timeout_s": 600}},
         verifier=Task(env="coding", id="check", args={"strict": True})),
    Task(env="other", id="composed", args={"k": "v"},
         runtime_config={"compose": {"document": str(out / "env" / "compose.yaml"),
                                     "root": str(out / "env")}}),
]
Taskset("hud", rows).to_file(out / "hud.json")
Taskset("hud", rows).to_file(out / "hud.jsonl")
Taskset("empty", []).to_file(out / "empty.jsonl")
row = rows[2].model_dump(mode="json", exclude_none=True)
(out / "single.json").write_text(json.dumps(row, indent=2))
print("RESULT=" + json.dumps([t.slug for t in rows]))
"""

HUD_READER = """
import json, sys
from pathlib import Path
from hud.eval import Taskset

source, back = Path(sys.argv[1]), Path(sys.argv[2])
ts = Taskset.from_file(source)
ts.to_file(back)
print("RESULT=" + json.dumps([t.slug for t in ts]))
"""

PROMPT_ENV = """
from mcp.types import PromptMessage, TextContent
from proctor import Environment

env = Environment("prompt-messages")


@env.template
async def chat(word: str = "hi"):
    text = TextContent(type="text", text=f"Say {word}.")
    answer = yield [PromptMessage(role="user", content=text)]
    yield 1.0 if answer == word else 0.0
"""

HUD_PROMPT_DRIVER = """
import asyncio, json, sys
import hud
from hud.eval import Runtime
from hud.eval.run import _prompt_messages
from mcp.types import PromptMessage, TextContent


async def serve_and_drive(env_file):
    server = await asyncio.create_subprocess_exec(
        sys.executable, "-m", "proctor.serve", env_file, "--port", "0",
        stdout=asyncio.subprocess.PIPE,
    )
    try:
        line = (await asyncio.wait_for(server.stdout.readline(), 60)).decode()
        url = "tcp://127.0.0.1:" + line.strip().removeprefix("PROCTOR_SERVE_PORT=")
        async with hud.connect(Runtime(url)) as client:
            started = await client.start_task("chat", {"word": "yes"})
            graded = await client.grade({"answer": "yes"})
    finally:
        server.terminate()
        await server.wait()
    text = TextContent(type="text", text="Say yes.")
    expected = [PromptMessage(role="user", content=text).model_dump(mode="json")]
    coerced = [m.model_dump(mode="json") for i in started["prompt"] for m in _prompt_messages(i)]
    return {"started": started, "graded": graded, "expected": expected, "coerced": coerced}


print("RESULT=" + json.dumps(asyncio.run(serve_and_drive(sys.argv[1]))))
"""


@pytest.fixture(scope="module")
def run_peer(
    peers_python: str,
    hud_environ: dict[str, str],
    hud_dirs: dict[str, Path],
    tmp_path_factory: pytest.TempPathFactory,
) -> Any:
    """Run a script under the peers interpreter; returns its RESULT= line, parsed."""

    def run(script: str, *argv: str) -> Any:
        path = tmp_path_factory.mktemp("peer") / "script.py"
        path.write_text(textwrap.dedent(script))
        proc = subprocess.run(
            [peers_python, str(path), *argv], env=hud_environ, cwd=hud_dirs["cwd"],
            capture_output=True, text=True, timeout=120, check=False,
        )  # fmt: skip
        lines = [line for line in proc.stdout.splitlines() if line.startswith(RESULT)]
        if proc.returncode != 0 or len(lines) != 1:
            pytest.fail(f"peer exited {proc.returncode}\n{proc.stdout}\n{proc.stderr[-8000:]}")
        return json.loads(lines[0][len(RESULT) :])

    return run


@pytest.fixture(scope="module")
def hud_files(run_peer: Any, tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, list[str]]:
    """The files HUD wrote (read-only for the tests) and its slugs for the rows."""
    out = tmp_path_factory.mktemp("written-by-hud")
    return out, run_peer(HUD_WRITER, str(out))


@pytest.mark.parametrize("name", ["hud.json", "hud.jsonl", "empty.jsonl"])
def test_files_hud_writes_load_with_its_slugs_and_write_back_identically(
    hud_files: tuple[Path, list[str]], tmp_path: Path, name: str
) -> None:
    folder, slugs = hud_files
    source = folder / name
    ts = Taskset.from_file(source)
    assert [t.slug for t in ts] == ([] if name == "empty.jsonl" else slugs)
    back = tmp_path / f"back{source.suffix}"
    ts.to_file(back)
    assert back.read_bytes() == source.read_bytes()


def test_every_hud_field_survives(hud_files: tuple[Path, list[str]]) -> None:
    folder, _ = hud_files
    custom = Taskset.from_file(folder / "hud.json")["my-slug"]
    assert custom.validation == [{"name": "submit", "arguments": {"answer": "x"}}]
    assert custom.verifier == Task(env="coding", id="check", args={"strict": True})
    assert custom.runtime_config is not None
    assert custom.runtime_config["resources"]["cpu"] == 2.0
    # HUD's compose paths, relative to the task file, are kept as written
    composed = Taskset.from_file(folder / "hud.jsonl")[3]
    assert composed.runtime_config == {"compose": {"document": "env/compose.yaml", "root": "env"}}


def test_a_single_task_object_loads(hud_files: tuple[Path, list[str]]) -> None:
    folder, _ = hud_files
    assert [t.slug for t in Taskset.from_file(folder / "single.json")] == ["my-slug"]


@pytest.mark.parametrize("suffix", [".json", ".jsonl"])
def test_files_proctor_writes_load_in_hud_with_the_same_slugs(
    run_peer: Any, tmp_path: Path, suffix: str
) -> None:
    rows = [
        Task(env="e", id="add", args={"a": 1, "b": [2.5, None], "s": "\u00fcber \U0001f600"}),
        Task(env="e", id="plain"),
        Task(env="e", id="x", args={"n": 2**80}, columns={"split": "dev"},
             validation=[{"k": 1}], agent_config={"max_steps": 3},
             verifier=Task(env="e", id="check")),
    ]  # fmt: skip
    source = tmp_path / f"mine{suffix}"
    Taskset("mine", rows).to_file(source)
    back = tmp_path / f"hud-back{suffix}"
    assert run_peer(HUD_READER, str(source), str(back)) == [t.slug for t in rows]
    assert back.read_bytes() == source.read_bytes()


def test_prompt_messages_reach_huds_client_as_huds_server_sends_them(
    run_peer: Any, tmp_path: Path
) -> None:
    env_file = tmp_path / "prompt_env.py"
    env_file.write_text(textwrap.dedent(PROMPT_ENV))
    result = run_peer(HUD_PROMPT_DRIVER, str(env_file))
    assert result["started"]["prompt"] == result["expected"]
    assert result["coerced"] == result["expected"]
    assert result["graded"]["score"] == 1.0
