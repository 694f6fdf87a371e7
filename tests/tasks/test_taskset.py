"""`Taskset`: operations, file formats both ways, and every error path."""

from __future__ import annotations

import os
import re
import stat
import textwrap
from pathlib import Path
from typing import Any

import orjson
import pytest
from hypothesis import given
from hypothesis import strategies as st

from proctor._errors import TasksetError
from proctor.records import Task
from proctor.tasks import Taskset


def _task(i: int, **kw: Any) -> Task:
    return Task(env="math", id="add", args={"a": i}, **kw)


def _write(path: Path, text: str) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(textwrap.dedent(text).lstrip())
    return path


@pytest.fixture
def ts() -> Taskset:
    return Taskset("arith", [_task(i) for i in range(8)] + [Task(env="math", id="zero")])


# --- operations -------------------------------------------------------------------------


def test_basic_accessors(ts: Taskset) -> None:
    assert ts.name == "arith"
    assert isinstance(ts.tasks, tuple)
    assert len(ts) == 9
    assert list(ts) == list(ts.tasks)
    assert ts[0] is ts.tasks[0]
    assert ts[-1].slug == "zero"
    assert ts["zero"] is ts.tasks[-1]
    assert ts[ts.tasks[3].slug] is ts.tasks[3]


def test_contains(ts: Taskset) -> None:
    assert "zero" in ts
    assert ts.tasks[2].slug in ts
    assert "nope" not in ts
    assert 0 not in ts
    assert ["zero"] not in ts


def test_repr(ts: Taskset) -> None:
    assert repr(ts) == "<Taskset 'arith': 9 tasks>"


def test_empty_taskset() -> None:
    empty = Taskset("none")
    assert len(empty) == 0
    assert list(empty) == []
    with pytest.raises(KeyError, match="it is empty"):
        empty["x"]


def test_missing_slug_lists_known_slugs(ts: Taskset) -> None:
    with pytest.raises(KeyError) as info:
        ts["qqqqqq"]
    message = str(info.value)
    assert "'qqqqqq'" in message and "'arith'" in message
    assert ts.tasks[0].slug in message
    assert "(9 in all)" in message


def test_missing_slug_suggests_close_matches(ts: Taskset) -> None:
    with pytest.raises(KeyError, match="did you mean 'zero'"):
        ts["zer0"]


def test_missing_position_is_index_error(ts: Taskset) -> None:
    with pytest.raises(IndexError):
        ts[9]


def test_duplicate_slugs_raise_naming_the_slug() -> None:
    with pytest.raises(TasksetError, match="duplicate slug 'add-"):
        Taskset("dup", [_task(1), _task(1)])
    with pytest.raises(TasksetError, match="duplicate slug 'same'"):
        Taskset("dup", [_task(1, slug="same"), _task(2, slug="same")])


def test_non_task_items_raise() -> None:
    with pytest.raises(TypeError, match="expected Task, got dict"):
        Taskset("bad", [{"env": "e", "id": "x"}])  # type: ignore[list-item]


def test_filter_keeps_taskset_order(ts: Taskset) -> None:
    picked = ts.filter(["zero", ts.tasks[1].slug])
    assert [t.slug for t in picked] == [ts.tasks[1].slug, "zero"]
    assert picked.name == "arith"
    assert ts.filter([]).tasks == ()


def test_filter_takes_a_single_string_as_one_slug(ts: Taskset) -> None:
    assert [t.slug for t in ts.filter("zero")] == ["zero"]


def test_exclude(ts: Taskset) -> None:
    rest = ts.exclude(["zero"])
    assert len(rest) == 8
    assert "zero" not in rest
    assert rest.tasks == ts.tasks[:-1]
    assert ts.exclude([]).tasks == ts.tasks


@pytest.mark.parametrize("method", ["filter", "exclude"])
def test_unknown_slug_raises_naming_it(ts: Taskset, method: str) -> None:
    with pytest.raises(TasksetError, match="no tasks 'typo', 'other' in taskset 'arith'"):
        getattr(ts, method)(["zero", "typo", "other", "typo"])


# --- JSON and JSONL ---------------------------------------------------------------------


@pytest.mark.parametrize("suffix", [".json", ".jsonl"])
def test_round_trip(tmp_path: Path, ts: Taskset, suffix: str) -> None:
    rich = Taskset(
        "rich",
        [
            *ts,
            Task(
                env="e",
                id="t",
                args={"s": 'é\n"q"', "f": 0.1, "n": None, "l": [1, [2, {}]]},
                slug="custom",
                columns={"split": "dev"},
                agent_config={"max_steps": 3},
                runtime_config={},
            ),
        ],
    )
    path = tmp_path / f"rich{suffix}"
    rich.to_file(path)
    loaded = Taskset.from_file(path)
    assert loaded == rich  # the stem gives the name back
    assert Taskset.from_file(path, name="other") != rich


@pytest.mark.parametrize("suffix", [".json", ".jsonl"])
def test_empty_round_trip(tmp_path: Path, suffix: str) -> None:
    path = tmp_path / f"empty{suffix}"
    Taskset("empty").to_file(path)
    assert Taskset.from_file(path).tasks == ()


def test_json_is_an_indented_array_of_full_rows(tmp_path: Path) -> None:
    path = tmp_path / "t.json"
    Taskset("t", [_task(1)]).to_file(path)
    text = path.read_text()
    assert text.startswith('[\n  {\n    "env": "math",')
    assert orjson.loads(text) == [
        {"env": "math", "id": "add", "args": {"a": 1}, "slug": _task(1).slug}
    ]


def test_jsonl_is_one_row_per_line_as_hud_writes_it(tmp_path: Path, ts: Taskset) -> None:
    path = tmp_path / "t.jsonl"
    ts.to_file(path)
    lines = path.read_text().splitlines()
    assert len(lines) == len(ts)
    assert lines[-1] == '{"env": "math", "id": "zero", "args": {}, "slug": "zero"}'


def test_write_is_atomic_and_keeps_mode(tmp_path: Path, ts: Taskset) -> None:
    path = tmp_path / "t.jsonl"
    path.write_text("old\n")
    path.chmod(0o640)
    ts.to_file(path)
    assert Taskset.from_file(path).tasks == ts.tasks
    assert stat.S_IMODE(path.stat().st_mode) == 0o640
    assert os.listdir(tmp_path) == ["t.jsonl"]


def test_new_file_is_readable_by_others(tmp_path: Path, ts: Taskset) -> None:
    path = tmp_path / "t.json"
    ts.to_file(path)
    assert stat.S_IMODE(path.stat().st_mode) == 0o644


def test_failed_write_leaves_no_temp_file(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    def broken(src: str, dst: str) -> None:
        raise OSError("disk on fire")

    monkeypatch.setattr(os, "replace", broken)
    with pytest.raises(OSError, match="disk on fire"):
        Taskset("t", [_task(1)]).to_file(tmp_path / "t.json")
    assert os.listdir(tmp_path) == []


def test_to_file_unknown_suffix(tmp_path: Path, ts: Taskset) -> None:
    with pytest.raises(TasksetError, match=r"t\.csv: cannot write '\.csv'"):
        ts.to_file(tmp_path / "t.csv")


def test_jsonl_skips_blank_lines(tmp_path: Path) -> None:
    path = _write(
        tmp_path / "t.jsonl",
        """
        {"env": "e", "id": "a"}

           \t
        {"env": "e", "id": "b"}
        """,
    )
    assert [t.slug for t in Taskset.from_file(path)] == ["a", "b"]


def test_json_object_form_gives_the_name(tmp_path: Path) -> None:
    path = tmp_path / "file.json"
    path.write_text('{"name": "inner", "tasks": [{"env": "e", "id": "a"}]}')
    assert Taskset.from_file(path).name == "inner"
    assert Taskset.from_file(path, name="forced").name == "forced"


def test_name_defaults_to_the_stem(tmp_path: Path) -> None:
    path = tmp_path / "my-set.jsonl"
    Taskset("other", [_task(1)]).to_file(path)
    assert Taskset.from_file(path).name == "my-set"
    assert Taskset.from_file(path, name="x").name == "x"


# --- errors name the file and line ------------------------------------------------------


def test_missing_file(tmp_path: Path) -> None:
    path = tmp_path / "nope.jsonl"
    with pytest.raises(TasksetError) as info:
        Taskset.from_file(path)
    assert str(info.value) == f"{path}: no such file"


def test_unknown_suffix(tmp_path: Path) -> None:
    path = _write(tmp_path / "tasks.yaml", "- id: x\n")
    with pytest.raises(TasksetError, match=r"tasks\.yaml: unknown taskset format '\.yaml'"):
        Taskset.from_file(path)


def _jsonl_error(tmp_path: Path, third_line: str) -> str:
    lines = ['{"env": "e", "id": "a"}', '{"env": "e", "id": "b"}', third_line]
    path = tmp_path / "tasks.jsonl"
    path.write_text("\n".join(lines) + "\n")
    with pytest.raises(TasksetError) as info:
        Taskset.from_file(path)
    message = str(info.value)
    assert message.startswith(f"{path}:3: ")
    return message.removeprefix(f"{path}:3: ")


def test_jsonl_malformed_line(tmp_path: Path) -> None:
    assert _jsonl_error(tmp_path, '{"env": "e", "id": }').startswith("invalid JSON: ")


def test_jsonl_row_missing_id(tmp_path: Path) -> None:
    assert _jsonl_error(tmp_path, '{"env": "e"}') == "invalid task: id: Field required"


def test_jsonl_row_with_unknown_field_keeps_it(tmp_path: Path) -> None:
    path = _write(tmp_path / "t.jsonl", '{"env": "e", "id": "c", "colour": "red"}\n')
    assert Taskset.from_file(path)["c"].model_extra == {"colour": "red"}


def test_jsonl_row_of_wrong_types(tmp_path: Path) -> None:
    assert _jsonl_error(tmp_path, '{"env": "e", "id": "c", "args": [1]}') == (
        "invalid task: args: Input should be a valid dictionary"
    )
    assert _jsonl_error(tmp_path, "[1]").startswith("invalid task: Input should be")


def test_jsonl_duplicate_slug_names_both_lines(tmp_path: Path) -> None:
    message = _jsonl_error(tmp_path, '{"env": "e", "id": "a"}')
    assert message == "duplicate slug 'a' (first on line 1)"


def test_json_syntax_error_names_the_line(tmp_path: Path) -> None:
    path = _write(tmp_path / "t.json", '[\n  {"env": "e", "id": "a"},\n  {"env": \n]\n')
    with pytest.raises(
        TasksetError, match=rf"^{re.escape(str(path))}:4: invalid JSON: .*\(column 1\)$"
    ):
        Taskset.from_file(path)


@pytest.mark.parametrize("wrapped", [False, True])
def test_json_bad_row_names_its_line(tmp_path: Path, wrapped: bool) -> None:
    rows = [{"env": "e", "id": "a", "args": {"k": [1, 2]}}, {"env": "e", "id": "b"}, {"env": "e"}]
    doc: object = {"name": "n", "tasks": rows} if wrapped else rows
    path = tmp_path / "t.json"
    path.write_bytes(orjson.dumps(doc, option=orjson.OPT_INDENT_2))
    start = next(
        n for n, line in enumerate(path.read_text().splitlines(), 1) if line.strip() == '"env": "e"'
    )
    with pytest.raises(TasksetError) as info:
        Taskset.from_file(path)
    assert str(info.value) == f"{path}:{start - 1}: invalid task: id: Field required"


def test_json_rows_on_one_line(tmp_path: Path) -> None:
    path = _write(
        tmp_path / "t.json", '{"tasks": [{"env": "e", "id": "a"},\n{"env": "e", "id": "a"}]}'
    )
    with pytest.raises(TasksetError, match=r":2: duplicate slug 'a' \(first on line 1\)$"):
        Taskset.from_file(path)


@pytest.mark.parametrize(
    "text",
    [
        "3",
        '{"tasks": {}}',
        '{"name": 1, "tasks": []}',
        '{"tasks": [], "extra": 1}',
    ],
)
def test_json_wrong_shape(tmp_path: Path, text: str) -> None:
    path = _write(tmp_path / "t.json", text)
    with pytest.raises(
        TasksetError, match=rf"^{re.escape(str(path))}: expected a JSON array of tasks"
    ):
        Taskset.from_file(path)


def test_unreadable_file(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    def denied(self: Path) -> bytes:
        raise PermissionError(13, "Permission denied")

    path = _write(tmp_path / "t.jsonl", "")
    monkeypatch.setattr(Path, "read_bytes", denied)
    with pytest.raises(TasksetError, match=rf"^{re.escape(str(path))}: Permission denied$"):
        Taskset.from_file(path)


# --- Python sources ---------------------------------------------------------------------

_HEADER = "from proctor import Task, Taskset\n"


def _module(path: Path, body: str) -> Path:
    return _write(path, _HEADER + textwrap.dedent(body))


def test_py_collects_globals_in_definition_order(tmp_path: Path) -> None:
    path = _module(
        tmp_path / "mixed.py",
        """
        first = Task(env="e", id="first")
        pair = [Task(env="e", id="p1"), Task(env="e", id="p2")]
        NOT_TASKS = [1, 2]
        empty = []
        trio = (Task(env="e", id="t1"),)
        named = Taskset("named", [Task(env="e", id="s1")])
        again = [first, pair[0]]
        """,
    )
    loaded = Taskset.from_file(path)
    assert [t.slug for t in loaded] == ["first", "p1", "p2", "t1", "s1"]
    assert loaded.name == "mixed"


def test_py_single_taskset_gives_its_name_and_order(tmp_path: Path) -> None:
    path = _module(
        tmp_path / "only.py",
        """
        b = Task(env="e", id="b")
        a = Task(env="e", id="a")
        SUITE = Taskset("suite", [a, b])
        """,
    )
    loaded = Taskset.from_file(path)
    assert loaded.name == "suite"
    assert [t.slug for t in loaded] == ["a", "b"]
    assert Taskset.from_file(path, name="x").name == "x"


def test_py_taskset_plus_other_rows_uses_the_stem(tmp_path: Path) -> None:
    path = _module(
        tmp_path / "more.py",
        """
        SUITE = Taskset("suite", [Task(env="e", id="a")])
        extra = Task(env="e", id="b")
        """,
    )
    loaded = Taskset.from_file(path)
    assert (loaded.name, [t.slug for t in loaded]) == ("more", ["a", "b"])


def test_py_raising_at_import_names_file_and_line(tmp_path: Path) -> None:
    path = _write(tmp_path / "boom.py", _HEADER + "x = 1\nraise RuntimeError('no luck')\n")
    with pytest.raises(TasksetError, match=r"boom\.py:3: RuntimeError: no luck"):
        Taskset.from_file(path)


def test_py_syntax_error_names_file_and_line(tmp_path: Path) -> None:
    path = _write(tmp_path / "syntax.py", _HEADER + "\ndef broken(:\n")
    with pytest.raises(TasksetError, match=r"syntax\.py:3: SyntaxError"):
        Taskset.from_file(path)


def test_py_with_no_tasks(tmp_path: Path) -> None:
    path = _write(tmp_path / "nothing.py", _HEADER + "x = [1]\n")
    with pytest.raises(TasksetError, match=r"nothing\.py: defines no Task, Taskset or list"):
        Taskset.from_file(path)


def test_py_duplicate_slugs_name_the_file(tmp_path: Path) -> None:
    path = _write(
        tmp_path / "dups.py",
        _HEADER + 'a = Task(env="e", id="x")\nb = Task(env="other", id="x")\n',
    )
    with pytest.raises(
        TasksetError, match=rf"^{re.escape(str(path))}: taskset 'dups': duplicate slug 'x'$"
    ):
        Taskset.from_file(path)


def test_directory_reads_its_task_files_in_order(tmp_path: Path) -> None:
    folder = tmp_path / "suite"
    _write(folder / "tasks_b.py", _HEADER + 'b = Task(env="e", id="b")\n')
    _write(folder / "tasks_a.py", _HEADER + 'a = Task(env="e", id="a")\n')
    _write(folder / "tasks.py", _HEADER + 'first = Task(env="e", id="first")\n')
    _write(folder / "_helper.py", "HELP = 1\n")
    loaded = Taskset.from_file(folder)
    assert (loaded.name, [t.slug for t in loaded]) == ("suite", ["first", "a", "b"])
    assert Taskset.source_files(folder) == [
        folder / "tasks.py",
        folder / "tasks_a.py",
        folder / "tasks_b.py",
    ]


def test_directory_task_file_without_tasks_raises(tmp_path: Path) -> None:
    folder = tmp_path / "suite"
    _write(folder / "tasks.py", _HEADER + 'a = Task(env="e", id="a")\n')
    _write(folder / "tasks_util.py", "HELP = 1\n")
    with pytest.raises(TasksetError, match=r"tasks_util\.py: defines no Task"):
        Taskset.from_file(folder)


def test_package_directory(tmp_path: Path) -> None:
    package = tmp_path / "pkgtasks"
    _write(package / "__init__.py", _HEADER + 'ALL = Taskset("pkg", [Task(env="e", id="p")])\n')
    loaded = Taskset.from_file(package)
    assert (loaded.name, [t.slug for t in loaded]) == ("pkg", ["p"])


def test_directory_without_task_files_imports_nothing(tmp_path: Path) -> None:
    _write(tmp_path / "d" / "_private.py", "x = 1\n")
    _write(tmp_path / "d" / "script.py", "raise SystemExit('imported')\n")
    with pytest.raises(TasksetError, match=r"needs tasks\.py or tasks_\*\.py"):
        Taskset.from_file(tmp_path / "d")


@pytest.mark.parametrize("filename", ["tasks.json", "tasks.jsonl"])
def test_directory_with_one_data_file(tmp_path: Path, ts: Taskset, filename: str) -> None:
    folder = tmp_path / "data"
    folder.mkdir()
    ts.to_file(folder / filename)
    loaded = Taskset.from_file(folder)
    assert (loaded.name, loaded.tasks) == ("data", ts.tasks)


def test_directory_data_file_errors_name_the_file(tmp_path: Path) -> None:
    path = _write(tmp_path / "data" / "tasks.jsonl", '{"env": "e"}\n')
    with pytest.raises(
        TasksetError, match=rf"^{re.escape(str(path))}:1: invalid task: id: Field required$"
    ):
        Taskset.from_file(tmp_path / "data")


@pytest.mark.parametrize("files", [[], ["tasks.json", "tasks.jsonl"], ["other.json"]])
def test_directory_without_a_single_source(tmp_path: Path, files: list[str]) -> None:
    folder = tmp_path / "d"
    folder.mkdir()
    for name in files:
        (folder / name).write_text("[]")
    with pytest.raises(TasksetError, match=r"exactly one of tasks\.json, tasks\.jsonl"):
        Taskset.from_file(folder)


# --- property: any JSON-able row survives both formats exactly --------------------------

_scalars = (
    st.none()
    | st.booleans()
    | st.integers(min_value=-(2**63), max_value=2**64 - 1)
    | st.floats(allow_nan=False, allow_infinity=False)
    | st.text()
)
_values = st.recursive(
    _scalars,
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(), inner, max_size=4),
    max_leaves=12,
)
_objects = st.dictionaries(st.text(), _values, max_size=4)
_tasks = st.builds(
    Task,
    env=st.text(),
    id=st.text(min_size=1),
    args=_objects,
    slug=st.just("") | st.text(min_size=1),
    columns=st.none() | _objects,
    agent_config=st.none() | _objects,
    runtime_config=st.none() | _objects,
)


@given(rows=st.lists(_tasks, max_size=5, unique_by=lambda t: t.slug))
def test_random_rows_round_trip_exactly(
    tmp_path_factory: pytest.TempPathFactory, rows: list[Task]
) -> None:
    folder = tmp_path_factory.mktemp("prop")
    original = Taskset("prop", rows)
    for suffix in (".json", ".jsonl"):
        path = folder / f"prop{suffix}"
        original.to_file(path)
        loaded = Taskset.from_file(path)
        assert loaded.tasks == original.tasks
        assert [orjson.dumps(t.model_dump()) for t in loaded] == [
            orjson.dumps(t.model_dump()) for t in original
        ]


def test_directory_sharing_one_taskset_keeps_its_name(tmp_path: Path) -> None:
    folder = tmp_path / "shared"
    # (module names are per process: `tasks` may already be another test's folder)
    _module(folder / "tasks_base.py", 'SUITE = Taskset("suite", [Task(env="e", id="a")])\n')
    _module(folder / "tasks_reuse.py", "from tasks_base import SUITE\n")
    loaded = Taskset.from_file(folder)
    assert (loaded.name, [t.slug for t in loaded]) == ("suite", ["a"])
