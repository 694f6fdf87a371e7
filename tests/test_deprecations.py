"""Renamed and moved public names keep working for one minor release, with a warning.

Each old name resolves to the very object that replaced it and warns with a
DeprecationWarning naming the new name and the release that removes it; `Runtime`,
which changed meaning, refuses the old call with a TypeError naming `UrlRuntime`.
"""

from __future__ import annotations

import importlib
import subprocess
import sys
from collections.abc import Callable

import pytest

import proctor
from proctor._public import REMOVED_IN
from proctor.runtimes import Runtime, UrlRuntime

# (module, old name, new home, new name)
ALIASES = [
    ("proctor", "Client", "proctor", "EnvClient"),
    ("proctor", "Server", "proctor", "EnvServer"),
    ("proctor", "Limits", "proctor", "ModelLimits"),
    ("proctor", "Provider", "proctor", "Runtime"),
    ("proctor", "EvaluationResult", "proctor", "Grade"),
    ("proctor.channel", "Client", "proctor.channel", "EnvClient"),
    ("proctor.channel", "Server", "proctor.channel", "EnvServer"),
    ("proctor.proxy", "Limits", "proctor.proxy", "ModelLimits"),
    ("proctor.runtimes", "Provider", "proctor.runtimes", "Runtime"),
    ("proctor.runtimes", "ProviderLike", "proctor.runtimes", "RuntimeLike"),
    ("proctor.env", "EvaluationResult", "proctor.records", "Grade"),
    ("proctor.env", "SubScore", "proctor.records", "SubScore"),
    ("proctor.models", "FakeClock", "proctor.testing", "FakeClock"),
    ("proctor.engine", "Run", "proctor.agents", "Run"),
    ("proctor.engine", "Grade", "proctor.records", "Grade"),
    ("proctor.engine", "Trace", "proctor.records", "Trace"),
    ("proctor.tasks", "Task", "proctor.records", "Task"),
]


@pytest.mark.parametrize(("module", "old", "home", "new"), ALIASES)
def test_an_old_name_warns_and_resolves_to_the_new_object(
    module: str, old: str, home: str, new: str
) -> None:
    with pytest.warns(DeprecationWarning) as caught:
        value = getattr(importlib.import_module(module), old)
    assert value is getattr(importlib.import_module(home), new)
    message = str(caught[0].message)
    assert f"{module}.{old} is deprecated" in message
    assert f"use {home}.{new}" in message
    assert f"removed in {REMOVED_IN}" in message
    assert caught[0].filename == __file__  # the warning points at the caller


@pytest.mark.parametrize(("module", "old"), {(m, o) for m, o, _, _ in ALIASES})
def test_old_names_stay_out_of_the_public_listing(module: str, old: str) -> None:
    package = importlib.import_module(module)
    assert old not in package.__all__
    assert old not in dir(package)


def test_from_import_of_an_old_name_works() -> None:
    with pytest.warns(DeprecationWarning, match="proctor.proxy.ModelLimits"):
        from proctor.proxy import Limits  # type: ignore[attr-defined]
    assert Limits is proctor.ModelLimits


def test_an_unknown_name_is_still_an_attribute_error() -> None:
    import proctor.channel

    with pytest.raises(AttributeError, match=r"'proctor\.channel' has no attribute 'Nope'"):
        proctor.channel.Nope  # type: ignore[attr-defined]  # noqa: B018


@pytest.mark.parametrize(
    "call",
    [
        lambda: Runtime("tcp://127.0.0.1:1"),  # type: ignore[abstract]
        lambda: Runtime(url="tcp://127.0.0.1:1"),  # type: ignore[abstract]
    ],
)
def test_the_old_runtime_call_names_url_runtime(call: Callable[[], object]) -> None:
    with pytest.raises(TypeError, match=r"runtime contract .* use UrlRuntime\(url\)"):
        call()
    assert repr(UrlRuntime("tcp://127.0.0.1:1")) == "UrlRuntime('tcp://127.0.0.1:1')"


def test_a_runtime_subclass_is_still_made() -> None:
    class Mine(Runtime):
        def __init__(self, name: str) -> None:
            self.name = name

        def __call__(self, task):
            raise NotImplementedError

    assert Mine("x").name == "x"


def test_aliases_are_removed_when_their_release_comes() -> None:
    """Fails once the version reaches REMOVED_IN: drop the aliases and this file then."""
    major, minor = (int(p) for p in proctor.__version__.split(".")[:2])
    assert (major, minor) < tuple(int(p) for p in REMOVED_IN.split("."))


def test_import_proctor_stays_light_with_the_aliases() -> None:
    """The lazy loader that resolves the aliases (`proctor._public`) loads no typing or
    inspect (tests/runtimes/test_cold_imports.py bounds the rest)."""
    code = "import sys, proctor; print([m for m in ('inspect', 'typing') if m in sys.modules])"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]"
