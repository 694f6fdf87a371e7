"""One mapping from exceptions to `error: ...` lines, shared by the CLI and the server."""

from __future__ import annotations

import errno

import pytest

from proctor._errors import CLIError, RemoteError, SourceError
from proctor._usererror import print_error, user_message


def test_user_mistakes_are_one_line() -> None:
    assert user_message(CLIError("--runtime: expected local")) == "--runtime: expected local"
    assert user_message(SourceError("env.py: cannot import")) == "env.py: cannot import"
    assert user_message(ValueError("bad value")) == "bad value"
    assert user_message(ValueError()) == "ValueError"
    assert user_message(RemoteError(-32000, "the task failed")) == "the task failed"


def test_os_errors_name_the_file_or_what_was_being_done() -> None:
    missing = FileNotFoundError(errno.ENOENT, "No such file or directory", "out.jsonl")
    assert user_message(missing) == "out.jsonl: No such file or directory"
    busy = OSError(errno.EADDRINUSE, "Address already in use")
    assert user_message(busy) == "Address already in use"
    where = "cannot listen on 127.0.0.1:80"
    assert user_message(busy, os_context=where) == f"{where}: Address already in use"


def test_a_bug_keeps_its_traceback() -> None:
    assert user_message(KeyError("x")) is None
    assert user_message(RuntimeError("boom")) is None


def test_print_error_writes_one_line_on_stderr(capsys: pytest.CaptureFixture[str]) -> None:
    print_error("no such file")
    assert capsys.readouterr() == ("", "error: no such file\n")
