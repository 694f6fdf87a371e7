"""HUD task rows as found in the wild: every field of HUD's `Task`, its slug rule, one
bare task object per `.json` file, unknown keys kept, and pydantic objects in yields.

The files HUD itself writes are checked in `tests/interop/test_hud_rows_interop.py`.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import AsyncGenerator
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from pydantic import BaseModel

from proctor import Environment, connect
from proctor._errors import TasksetError
from proctor.channel import EnvServer
from proctor.records import Task
from proctor.tasks import Taskset

# A row using every field HUD 0.6.21's Task has, shaped as HUD writes it.
HUD_ROW: dict[str, Any] = {
    "env": "coding",
    "id": "fix_bug",
    "args": {"repo": "demo", "difficulty": 3},
    "slug": "fix-bug-demo",
    "validation": [{"name": "submit", "arguments": {"answer": "x"}}],
    "agent_config": {"system_prompt": "Be brief.", "max_steps": 20},
    "columns": {"difficulty": "hard", "suite": "coding"},
    "runtime_config": {
        "image": "coding-env:latest",
        "resources": {"cpu": 2.0, "memory_mb": 4096, "gpu": {"type": ["a100"], "count": 1}},
        "limits": {"startup_timeout_s": 60, "run_timeout_s": 600},
    },
    "verifier": {"env": "coding", "id": "check", "args": {"strict": True}, "slug": "check-1"},
}


def hud_slug(task_id: str, args: dict[str, Any]) -> str:
    """HUD's default slug, written out independently of proctor."""
    if not args:
        return task_id
    canonical = json.dumps(args, sort_keys=True, default=str).encode()
    return f"{task_id}-{hashlib.sha1(canonical).hexdigest()[:8]}"


# --- rows -----------------------------------------------------------------------------


def test_every_hud_field_loads_and_dumps_back_in_hud_order() -> None:
    task = Task.model_validate(HUD_ROW)
    assert task.verifier is not None and task.verifier.slug == "check-1"
    assert task.validation == HUD_ROW["validation"]
    dumped = task.model_dump(mode="json", exclude_none=True)
    assert list(dumped) == list(HUD_ROW)  # same keys, same order
    assert dumped == HUD_ROW


@pytest.mark.parametrize("suffix", [".json", ".jsonl"])
def test_rows_with_validation_and_verifier_load_from_files(tmp_path: Path, suffix: str) -> None:
    path = tmp_path / f"hud{suffix}"
    if suffix == ".json":
        path.write_text(json.dumps([HUD_ROW], indent=2) + "\n")
    else:
        path.write_text(json.dumps(HUD_ROW) + "\n")
    ts = Taskset.from_file(path)
    assert ts["fix-bug-demo"].verifier == Task.model_validate(HUD_ROW["verifier"])
    out = tmp_path / f"out{suffix}"
    ts.to_file(out)
    assert out.read_bytes() == path.read_bytes()


def test_one_bare_task_object_is_a_taskset_of_one(tmp_path: Path) -> None:
    path = tmp_path / "single.json"
    path.write_text(json.dumps(HUD_ROW))
    ts = Taskset.from_file(path)
    assert (ts.name, [t.slug for t in ts]) == ("single", ["fix-bug-demo"])


def test_a_bad_bare_task_object_names_its_line(tmp_path: Path) -> None:
    path = tmp_path / "single.json"
    path.write_text('\n\n{"env": "e", "args": {}}\n')
    with pytest.raises(TasksetError, match=r"single\.json:3: invalid task: id: Field required$"):
        Taskset.from_file(path)


def test_unknown_keys_are_kept_and_written_back(tmp_path: Path) -> None:
    row = {"env": "e", "id": "t", "args": {}, "slug": "t", "owner": "ana", "tags": ["x"]}
    path = tmp_path / "t.jsonl"
    path.write_text(json.dumps(row) + "\n")
    ts = Taskset.from_file(path)
    assert ts["t"].model_extra == {"owner": "ana", "tags": ["x"]}
    ts.to_file(tmp_path / "out.jsonl")
    assert (tmp_path / "out.jsonl").read_text() == path.read_text()


def test_runtime_config_is_kept_as_written() -> None:
    # HUD's RuntimeConfig shape (compose with a path relative to the task file) stays a
    # plain mapping: proctor's runtimes read the keys they know.
    config = {"compose": {"document": "env/compose.yaml", "root": "env"}}
    task = Task(env="e", id="t", runtime_config=config)
    assert task.model_dump(mode="json", exclude_none=True)["runtime_config"] == config


def test_numbers_read_as_pythons_json_writes_them(tmp_path: Path) -> None:
    path = tmp_path / "t.jsonl"
    big = 10**30 + 1  # past 64 bits: orjson alone would read a float
    path.write_text(json.dumps({"env": "e", "id": "t", "args": {"n": big, "x": float("nan")}}))
    args = Taskset.from_file(path)[0].args
    assert args["n"] == big and isinstance(args["n"], int)
    assert args["x"] != args["x"]  # NaN


@pytest.mark.parametrize(
    ("raw", "error"),
    [
        (b'{"env": "e", "id": "\xff"}', "invalid JSON: str is not valid UTF-8"),
        (b'{"env": "e", "id": "t", "args": {"n": 1' + b"0" * 5000 + b"}}", "invalid JSON: "),
    ],
)
def test_what_neither_parser_reads_is_one_error(tmp_path: Path, raw: bytes, error: str) -> None:
    path = tmp_path / "t.jsonl"
    path.write_bytes(raw + b"\n")
    with pytest.raises(TasksetError, match=rf"t\.jsonl:1: {error}"):
        Taskset.from_file(path)


# --- slugs ----------------------------------------------------------------------------


@pytest.mark.parametrize(
    "args",
    [
        {},
        {"a": 1},
        {"b": 2, "a": 1},
        {"text": "héllo ✓", "nested": {"z": [1, 2.5, None, True], "a": "x"}},
        {"big": 2**70, "neg": -0.0},
    ],
)
def test_default_slug_is_huds(args: dict[str, Any]) -> None:
    assert Task(env="e", id="t", args=args).slug == hud_slug("t", args)


def test_a_value_json_cannot_hold_counts_as_its_str() -> None:
    args = {"path": Path("/x")}
    assert Task(env="e", id="t", args=args).slug == hud_slug("t", {"path": "/x"})


# --- round trip -------------------------------------------------------------------------

_scalars = (
    st.none()
    | st.booleans()
    | st.integers()
    | st.floats(allow_nan=False, allow_infinity=False)
    | st.text()
)
_values = st.recursive(
    _scalars,
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(), inner, max_size=4),
    max_leaves=12,
)
_objects = st.dictionaries(st.text(), _values, max_size=4)
_known = set(Task.model_fields)
_extras = st.dictionaries(
    st.text(min_size=1).filter(lambda k: k not in _known), _values.filter(lambda v: v is not None),
    max_size=2,
)  # fmt: skip
_verifiers = st.builds(Task, env=st.text(min_size=1), id=st.text(min_size=1), args=_objects)


@st.composite
def _rows(draw: st.DrawFn) -> Task:
    return Task(
        env=draw(st.text(min_size=1)),
        id=draw(st.text(min_size=1)),
        args=draw(_objects),
        slug=draw(st.just("") | st.text(min_size=1)),
        validation=draw(st.none() | st.lists(_objects, max_size=2)),
        agent_config=draw(st.none() | _objects),
        columns=draw(st.none() | _objects),
        runtime_config=draw(st.none() | _objects),
        verifier=draw(st.none() | _verifiers),
        solution=draw(_values),
        **draw(_extras),
    )


@settings(deadline=None)  # each example writes and fsyncs four files: no timing limit
@given(rows=st.lists(_rows(), max_size=4, unique_by=lambda t: t.slug))
def test_any_row_round_trips_through_both_formats(
    tmp_path_factory: pytest.TempPathFactory, rows: list[Task]
) -> None:
    folder = tmp_path_factory.mktemp("rows")
    original = Taskset("rows", rows)
    for suffix in (".json", ".jsonl"):
        path = folder / f"rows{suffix}"
        original.to_file(path)
        first = path.read_bytes()
        loaded = Taskset.from_file(path)
        assert loaded.tasks == original.tasks
        loaded.to_file(path)
        assert path.read_bytes() == first


# --- pydantic objects in yields -------------------------------------------------------


class Content(BaseModel):
    type: str = "text"
    text: str
    meta: dict[str, Any] | None = None


class Message(BaseModel):
    role: str
    content: Content


async def test_pydantic_objects_in_yields_cross_a_tcp_server() -> None:
    env = Environment("pydantic-yields")

    @env.template
    async def chat(word: str = "hi") -> AsyncGenerator[Any, Any]:
        answer = yield [Message(role="user", content=Content(text=f"Say {word}."))]
        yield {"score": 1.0 if answer == word else 0.0, "echo": Content(text=str(answer))}

    server = EnvServer(env)
    try:
        host, port = await server.tcp_address()
        async with connect(f"tcp://{host}:{port}") as client:
            started = await client.start_task("chat", {"word": "yes"})
            graded = await client.grade("yes")
    finally:
        await server.aclose()
    # as HUD's server sends them: model_dump(mode="json"), nulls included
    assert started["prompt"] == [
        {"role": "user", "content": {"type": "text", "text": "Say yes.", "meta": None}}
    ]
    assert graded["score"] == 1.0
    assert graded["echo"] == {"type": "text", "text": "yes", "meta": None}
