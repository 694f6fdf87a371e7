"""`proctor task list|start|grade`, including the parking path across processes."""

from __future__ import annotations

import json
import stat
from collections.abc import Iterator
from pathlib import Path

import pytest
from cli_helpers import LETTERS, Served, assert_user_error, proctor

COUNT_ARGS = json.dumps({"word": "banana", "letter": "a"})


@pytest.fixture(autouse=True)
def runtime_dir(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    """A private XDG_RUNTIME_DIR: where `task start` keeps resume tokens."""
    path = tmp_path / "runtime"
    path.mkdir()
    monkeypatch.setenv("XDG_RUNTIME_DIR", str(path))
    yield path


def test_list_from_source_prints_a_table() -> None:
    result = proctor("task", "list", "--source", LETTERS / "env.py")
    assert result.returncode == 0, result.stderr
    header, *rows = result.stdout.splitlines()
    assert header.split() == ["id", "description", "args"]
    assert [row.split()[0] for row in rows] == ["count", "reverse", "sum"]
    assert rows[0].endswith("word: string, letter: string")
    assert rows[2].endswith("numbers: array[integer]")
    assert result.stderr == ""


def test_list_from_url_matches_list_from_source(served: Served) -> None:
    remote = proctor("task", "list", "--url", served.url, "--json")
    local = proctor("task", "list", "--source", f"{LETTERS / 'tasks.py'}:letters", "--json")
    assert remote.returncode == local.returncode == 0, remote.stderr + local.stderr
    tasks = json.loads(remote.stdout)
    assert tasks == json.loads(local.stdout)
    assert [t["id"] for t in tasks] == ["count", "reverse", "sum"]
    assert tasks[0]["args"]["required"] == ["word", "letter"]


@pytest.mark.parametrize("mode", ["answer", "file", "stdin"])
def test_start_then_grade_in_another_process(served: Served, mode: str, tmp_path: Path) -> None:
    started = proctor("task", "start", "count", "--url", served.url, "--args", COUNT_ARGS)
    assert started.returncode == 0, started.stderr
    assert "'a'" in started.stdout and "'banana'" in started.stdout
    if mode == "answer":
        graded = proctor("task", "grade", "--url", served.url, "--answer", "3")
    elif mode == "file":
        (tmp_path / "answer.txt").write_text("There are 3.\n")
        graded = proctor(
            "task", "grade", "--url", served.url, "--answer-file", tmp_path / "answer.txt"
        )
    else:
        graded = proctor("task", "grade", "--url", served.url, "--answer-file", "-", stdin="3\n")
    assert graded.returncode == 0, graded.stderr
    assert graded.stdout == "score: 1.0\n"
    # The parked task was consumed: nothing is left to grade.
    again = proctor("task", "grade", "--url", served.url, "--answer", "3")
    assert_user_error(again, "no task in progress")


def test_json_start_and_grade_by_session(served: Served, runtime_dir: Path) -> None:
    sessions = []
    for word in ("abc", "xyz"):
        args = json.dumps({"word": word})
        result = proctor("task", "start", "reverse", "--url", served.url, "--args", args, "--json")
        assert result.returncode == 0, result.stderr
        doc = json.loads(result.stdout)
        assert doc["id"] == "reverse" and doc["args"] == {"word": word}
        assert f"'{word}'" in doc["prompt"]
        assert "resume_token" not in result.stdout
        sessions.append(doc["session_id"])
    latest = proctor("task", "grade", "--url", served.url, "--answer", "zyx")  # the last started
    assert latest.returncode == 0, latest.stderr
    assert latest.stdout == "score: 1.0\n"
    first = proctor(
        "task", "grade", "--url", served.url, "--session", sessions[0], "--answer", "x", "--json"
    )
    assert first.returncode == 0, first.stderr
    assert json.loads(first.stdout) == {"score": 0.0}
    assert_user_error(proctor("task", "grade", "--url", served.url, "--answer", "x"), "no task")
    assert list((runtime_dir / "proctor" / "sessions").iterdir()) == []  # graded: forgotten


def test_the_resume_token_is_kept_private_and_only_its_owner_grades(
    served: Served, runtime_dir: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    started = proctor("task", "start", "count", "--url", served.url, "--args", COUNT_ARGS)
    assert started.returncode == 0, started.stderr
    folder = runtime_dir / "proctor" / "sessions"
    (kept,) = folder.iterdir()
    assert stat.S_IMODE(folder.stat().st_mode) == 0o700
    assert stat.S_IMODE(kept.stat().st_mode) == 0o600
    record = json.loads(kept.read_text())
    assert record["url"] == served.url and record["session_id"] == kept.name
    assert record["resume_token"] not in started.stdout + started.stderr
    # Someone without the token: neither the latest-session lookup nor --session helps.
    monkeypatch.setenv("XDG_RUNTIME_DIR", str(tmp_path / "stranger"))
    stranger = proctor("task", "grade", "--url", served.url, "--answer", "3")
    assert_user_error(stranger, "no task in progress")
    named = proctor("task", "grade", "--url", served.url, "--session", kept.name, "--answer", "3")
    assert_user_error(named, f"cannot resume session {kept.name}", "no resume token")
    monkeypatch.setenv("XDG_RUNTIME_DIR", str(runtime_dir))
    owner = proctor("task", "grade", "--url", served.url, "--answer", "3")
    assert owner.returncode == 0, owner.stderr
    assert owner.stdout == "score: 1.0\n"


def test_start_reports_bad_args_and_unknown_tasks(served: Served) -> None:
    url = served.url
    bad_json = proctor("task", "start", "count", "--url", url, "--args", "{word: 1}")
    assert_user_error(bad_json, "--args is not valid JSON")
    not_object = proctor("task", "start", "count", "--url", url, "--args", "[1]")
    assert_user_error(not_object, "--args must be a JSON object")
    wrong_name = proctor("task", "start", "reverse", "--url", url, "--args", '{"wrd": "a"}')
    assert_user_error(wrong_name, "unknown argument(s) 'wrd'")
    unknown = proctor("task", "start", "nope", "--url", url)
    assert_user_error(unknown, "unknown task 'nope'")
    # None of those left a task behind.
    assert_user_error(proctor("task", "grade", "--url", url, "--answer", "x"), "no task")


def test_unreachable_url_fails_fast(dead_url: str, tmp_path: Path) -> None:
    quick = ("--ready-timeout", "0.3")
    for args in (
        ("task", "list", "--url", dead_url),
        ("task", "start", "count", "--url", dead_url, "--args", COUNT_ARGS),
        ("task", "grade", "--url", dead_url, "--answer", "3"),
    ):
        assert_user_error(proctor(*args, *quick), dead_url, "not ready after 0.3s")
    assert_user_error(proctor("task", "list", "--url", "http://example.com"), "unsupported scheme")
    missing = proctor("task", "grade", "--url", dead_url, "--answer-file", tmp_path / "none.txt")
    assert_user_error(missing, "none.txt", "No such file")


def test_list_source_errors(tmp_path: Path) -> None:
    assert_user_error(proctor("task", "list", "--source", tmp_path / "x.py"), "no such file")
    result = proctor("task", "list", "--url", "tcp://127.0.0.1:1", "--env", "letters")
    assert_user_error(result, "--env only applies with --source")
