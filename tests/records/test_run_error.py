"""`RunError` and the traceback it keeps: bounded, redacted, the server's first."""

from __future__ import annotations

import dataclasses
import pickle

import pytest

from proctor import RemoteError
from proctor._usererror import error_traceback, format_traceback, redact
from proctor.records import RunError


def raised(exc: BaseException) -> BaseException:
    try:
        raise exc
    except BaseException as caught:
        return caught


def test_run_error_keeps_its_positional_constructor() -> None:
    old = RunError("agent", "ValueError", "bad")
    assert (old.phase, old.type, old.message, old.traceback) == ("agent", "ValueError", "bad", None)
    new = RunError("agent", "ValueError", "bad", "Traceback ...")
    assert new.traceback == "Traceback ..." and new != old
    assert pickle.loads(pickle.dumps(new)) == new  # a Ray worker ships runs back
    with pytest.raises(dataclasses.FrozenInstanceError):
        new.traceback = None  # type: ignore[misc]


@pytest.mark.parametrize(
    "name", ["OPENAI_API_KEY", "GH_TOKEN", "client_secret", "DB_PASSWORD", "AWS_CREDS", "AUTH"]
)
def test_secret_looking_names_are_redacted(name: str) -> None:
    environ = {name: "s3cr3t-value", "PATH": "/usr/bin:/bin-long"}
    assert redact("s3cr3t-value in /usr/bin:/bin-long", environ) == (
        "[redacted] in /usr/bin:/bin-long"
    )


def test_short_values_are_not_redacted_and_longer_ones_go_first() -> None:
    environ = {"A_KEY": "short77", "B_TOKEN": "abcdefgh", "C_TOKEN": "abcdefgh-ijkl"}
    assert redact("short77 abcdefgh abcdefgh-ijkl", environ) == "short77 [redacted] [redacted]"


def test_an_exception_never_raised_has_no_traceback() -> None:
    assert format_traceback(ValueError("not raised")) is None
    assert error_traceback(ValueError("not raised")) is None


def test_the_servers_traceback_comes_first() -> None:
    remote = 'Traceback (most recent call last):\n  File "env.py", line 3\nValueError: x\n'
    exc = raised(RemoteError(-32000, "t: ValueError: x", {"traceback": remote}))
    text = error_traceback(exc)
    assert text is not None and text.startswith(remote)
    assert text.rstrip().endswith("RemoteError: [-32000] t: ValueError: x")


@pytest.mark.parametrize("data", [None, "text", {"traceback": 3}, {"other": "x"}, []])
def test_other_error_data_is_ignored(data: object) -> None:
    text = error_traceback(raised(RemoteError(-32000, "m", data)))
    assert text is not None and text.startswith("Traceback (most recent call last):")
    assert "environment server" not in text


def test_a_long_traceback_keeps_its_start_and_end_within_16_kib() -> None:
    text = format_traceback(raised(ValueError("é" * 50_000 + "END")))  # 2-byte characters
    assert text is not None and len(text.encode()) <= 16 * 1024
    assert text.startswith("Traceback (most recent call last):")
    assert "bytes of traceback cut" in text and text.endswith("END\n")
