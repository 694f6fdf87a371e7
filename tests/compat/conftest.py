"""HUD's own example environments served two ways and driven by proctor's client.

`proctor serve --compat hud FILE` serves each in a real child process (proctor's
interpreter, which has no HUD; the 2048 example's own dependency, fastmcp, needs
`mcp<2` and lives only in the peers venv, so that one runs under the peers interpreter
with `hud` made unimportable). HUD's own server (`python -m hud.environment.server`,
hud==0.6.21 in the peers venv) serves the same files when PROCTOR_PEERS_PYTHON is set;
those tests skip otherwise. Every child gets a scrubbed environment (no API keys or
HUD settings; HUD's platform URLs point at a closed loopback port) and binds 127.0.0.1.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Callable
from pathlib import Path

import pytest

from _support.hud_env import exact_env_argv, scrubbed_environ
from proctor import SubprocessRuntime
from proctor.runtimes import Runtime

PEERS_VAR = "PROCTOR_PEERS_PYTHON"
EXAMPLES = Path(__file__).resolve().parent / "hud_examples"
SRC = Path(__file__).resolve().parents[2] / "src"


@pytest.fixture(scope="session")
def peers_python() -> str:
    """The interpreter of the venv that has hud installed, or skip."""
    value = os.environ.get(PEERS_VAR)
    if not value:
        pytest.skip(f"{PEERS_VAR} is not set: run `make test` (it builds .venv-peers with hud)")
    if not Path(value).exists():
        pytest.skip(f"{PEERS_VAR}={value} does not exist: run `make peers`")
    return value


@pytest.fixture
def workdir(tmp_path: Path) -> Path:
    """A private working directory and HOME for one server child.

    The coding example grades with `bash -lc "python -m pytest ..."`; a login shell
    resets PATH from /etc/profile, so HOME's `.bash_profile` puts the test
    interpreter's folder (which has pytest) first again.
    """
    home = tmp_path / "home"
    home.mkdir()
    (home / ".bash_profile").write_text(f'export PATH="{Path(sys.executable).parent}:$PATH"\n')
    return home


@pytest.fixture
def serve(workdir: Path, request: pytest.FixtureRequest) -> Callable[[str, str], Runtime]:
    """`serve(server, example)`: a runtime starting a child that serves `example` (a file
    in hud_examples) by `server`: `proctor` (`proctor serve --compat hud` on this
    interpreter, which has no HUD), `proctor-peers` (the same on the peers interpreter
    with `hud` unimportable) or `hud` (HUD's own server). Its cwd is `workdir`."""

    def runtime(server: str, example: str) -> Runtime:
        source = str(EXAMPLES / example)
        environ = scrubbed_environ(workdir, workdir / "spans")
        if server == "proctor":
            argv = [sys.executable, "-m", "proctor.cli", "serve", "--compat", "hud", source]
        else:
            peers = request.getfixturevalue("peers_python")
            if server == "hud":
                argv = [peers, "-m", "hud.environment.server", source, "--port", "0"]
            else:
                environ["PYTHONPATH"] = f"{_hidden_hud(workdir)}:{SRC}"
                argv = [peers, "-m", "proctor.cli", "serve", "--compat", "hud", source]
        return SubprocessRuntime(
            command=exact_env_argv(environ, argv),
            cwd=workdir,
            log=workdir / "server.log",
            startup_timeout=60,
        )

    return runtime


def _hidden_hud(root: Path) -> Path:
    """A folder whose `hud.py` refuses to import: put first on PYTHONPATH, it hides the
    installed HUD, so what serves there cannot be HUD."""
    folder = root / "no-hud"
    folder.mkdir(exist_ok=True)
    (folder / "hud.py").write_text('raise ImportError("hud is hidden from this process")\n')
    return folder
