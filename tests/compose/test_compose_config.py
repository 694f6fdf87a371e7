"""The batch config's `compose` runtime entry: built into a `ComposeRuntime`, with its
Compose file checked before anything launches."""

from __future__ import annotations

from pathlib import Path

import pytest

from proctor import BatchConfigError
from proctor.batch import build_runtime, load_config
from proctor.runtimes import ComposeRuntime

EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "compose"


def _write(tmp_path: Path, runtime: str) -> Path:
    path = tmp_path / "batch.toml"
    path.write_text(
        "max_concurrent = 2\nexpected_rollouts = 3\n\n"
        f'[taskset]\nsource = "{EXAMPLE / "tasks.py"}"\n\n'
        f'[[agents]]\nkind = "python"\nagent = "{EXAMPLE / "tasks.py"}:clerk"\n\n'
        f'[runtime]\nkind = "compose"\n{runtime}'
    )
    return path


def test_a_compose_entry_builds_a_compose_runtime(tmp_path: Path) -> None:
    (tmp_path / "compose.yaml").write_text((EXAMPLE / "compose.yaml").read_text())
    config = load_config(
        _write(tmp_path, 'file = "compose.yaml"\nvariables = { PROCTOR_IMAGE = "img" }\n')
    )
    runtime = build_runtime(config, batch="b1")
    assert isinstance(runtime, ComposeRuntime) and runtime.batch == "b1"
    assert runtime.file is not None and runtime.file.services["db"].image == "img"
    assert runtime.file.path == str(tmp_path / "compose.yaml")  # beside the config


def test_a_malformed_compose_file_is_a_config_problem_naming_it(tmp_path: Path) -> None:
    (tmp_path / "compose.yaml").write_text("services: {main: {image: x, privileged: true}}\n")
    config = load_config(_write(tmp_path, 'file = "compose.yaml"\n'))
    with pytest.raises(BatchConfigError, match=r"runtime.file.*services.main.privileged"):
        build_runtime(config)


def test_secret_names_are_refused_in_variables(tmp_path: Path) -> None:
    with pytest.raises(BatchConfigError, match=r"API_KEY.*secrets never go in a config file"):
        load_config(_write(tmp_path, 'variables = { API_KEY = "sk-1" }\n'))


def test_ignored_ports_are_logged_once(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    (tmp_path / "compose.yaml").write_text("services: {main: {image: x, ports: ['80:80']}}\n")
    ComposeRuntime(tmp_path / "compose.yaml", "/env.py")
    assert [r.getMessage() for r in caplog.records] == [
        f"{tmp_path / 'compose.yaml'}: services.main.ports ignored: services reach each other"
        " by name, nothing is published"
    ]
