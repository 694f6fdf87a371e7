"""Owned temp folders: a killed owner's are removed by the next owner of the kind.

Review of issue 8: the client's forwarder folders (`proctor-fwd-*`) survived kill -9 of
the driver for good; the shell's and MCP server's folders too.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from proctor._tempdirs import owned_tempdir, owner, sweep


def _dead_pid() -> int:
    proc = subprocess.Popen([sys.executable, "-c", "pass"])
    proc.wait()
    return proc.pid


def test_sweep_removes_folders_whose_owner_is_gone_and_keeps_the_rest(tmp_path: Path) -> None:
    me = owner(os.getpid())
    assert me is not None
    dead = tmp_path / f"proctor-fwd-{_dead_pid()}-99-a"
    reused = tmp_path / f"proctor-fwd-{os.getpid()}-1-b"  # our pid, another start time
    live = tmp_path / f"proctor-fwd-{me}-c"
    other_kind = tmp_path / f"proctor-mcp-{_dead_pid()}-99-d"
    for folder in (dead, reused, live, other_kind):
        (folder / "0.sock").mkdir(parents=True)
    assert sorted(sweep("fwd", tmp_path)) == sorted([dead, reused])
    assert live.exists() and other_kind.exists()


@pytest.mark.skipif(os.geteuid() != 0, reason="chown to another uid needs root")
def test_sweep_leaves_other_users_folders(tmp_path: Path) -> None:
    theirs = tmp_path / f"proctor-fwd-{_dead_pid()}-99-x"
    theirs.mkdir()
    os.chown(theirs, 65534, 65534)
    assert sweep("fwd", tmp_path) == [] and theirs.exists()


def test_owned_tempdir_is_private_and_named_after_its_owner(tmp_path: Path) -> None:
    stale = tmp_path / f"proctor-shell-{_dead_pid()}-7-z"
    stale.mkdir()
    made = Path(owned_tempdir("shell", tmp_path))
    assert not stale.exists()
    assert made.name.startswith(f"proctor-shell-{owner(os.getpid())}-")
    assert made.stat().st_mode & 0o777 == 0o700
    assert sweep("shell", tmp_path) == [] and made.exists()


async def test_a_shell_server_folder_is_named_after_its_owner() -> None:
    from proctor.env import ShellServer

    server = ShellServer()
    await server.start()
    try:
        folder = Path(server.url.removeprefix("unix://")).parent
        assert folder.name.startswith(f"proctor-shell-{owner(os.getpid())}-")
    finally:
        await server.aclose()
