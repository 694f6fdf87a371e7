"""Graders that run something in the substrate: a command, or a uv script.

They run where the environment runs (its process, inside whatever substrate the
runtime gave it), never in the driver. `run` and `command` go through a given shell
(`ShellServer.run`, `ShellClient.run`) or start a local shell; `run_uv_script` has uv
install a script's inline (PEP 723) dependencies into uv's cache and an environment uv
keeps there for the script, so they never touch the environment's, or the driver's,
packages.

Every process gets an allowlisted environment (no keys or tokens), leads its own
process group (killed when it times out, and once it ended, so nothing it started
outlives the grader) and has its output capped, head and tail kept.
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import importlib
import os
import re
import shutil
import stat
import sys
import tempfile
import time
from collections.abc import Iterable, Mapping, Sequence
from typing import Literal, Protocol

from .._environ import allowed_environ
from .._tempdirs import owned_tempdir
from ._shell import ShellResult, _killpg, _Process

__all__ = ["Match", "Shell", "command", "run", "run_uv_script", "uv_binary"]

Match = Literal["contains", "regex", "exact"]

MAX_OUTPUT = 1024 * 1024
SCRIPTS = os.path.join(tempfile.gettempdir(), f"proctor-uv-scripts-{os.geteuid()}")
_LINGER = 0.5  # seconds for pipes held open by a background process after the exit
# What a uv script sees of this process's environment (plus `env=`): where things are
# and how to reach the index, never a key. UV_OFFLINE passes only with `offline=None`.
UV_ENV = frozenset(
    {
        "PATH", "HOME", "LANG", "LC_ALL", "TMPDIR", "UV_CACHE_DIR", "UV_PYTHON",
        "UV_SYSTEM_CERTS", "UV_NATIVE_TLS", "SSL_CERT_FILE", "SSL_CERT_DIR",
    }
)  # fmt: skip


class Shell(Protocol):
    """What `run` needs of a shell: `ShellServer` and `ShellClient` both are one."""

    async def run(
        self,
        command: str,
        *,
        timeout: float | None = None,  # noqa: ASYNC109 - the shell kills the group
        cwd: str | None = None,
    ) -> ShellResult:
        """Run `command` and return what it did."""
        ...


async def run(
    cmd: str,
    *,
    shell: Shell | None = None,
    cwd: str | os.PathLike[str] | None = None,
    timeout: float = 60.0,  # noqa: ASYNC109 - kills the process group, not the await
    max_output: int = MAX_OUTPUT,
) -> ShellResult:
    """Run a shell command in the substrate and return what it did, to score yourself.

    Args:
        cmd: the command line, run as `bash -c cmd` (or `/bin/sh`).
        shell: the environment's shell (`ShellServer`, injected as `shell`); None
            starts the shell here, in the environment's process.
        cwd: working directory (relative to the shell's own with `shell=`).
        timeout: seconds before the command's process group is killed
            (`timed_out` is then true and `exit_code` -9).
        max_output: cap in bytes on each of stdout and stderr (local runs; a shell
            applies its own).

    Raises:
        FileNotFoundError: `cwd` is not a directory.
        OSError: the shell could not start.
    """
    where = None if cwd is None else os.fspath(cwd)
    if shell is not None:
        return await shell.run(cmd, timeout=timeout, cwd=where)
    binary = shutil.which("bash") or "/bin/sh"
    argv = [binary, "-c", cmd]
    return await _exec(argv, _directory(where), allowed_environ(), timeout, max_output)


async def command(
    cmd: str,
    *,
    shell: Shell | None = None,
    cwd: str | os.PathLike[str] | None = None,
    timeout: float = 60.0,  # noqa: ASYNC109 - kills the process group, not the await
    expect_exit: int | None = 0,
    expect_output: str | None = None,
    match: Match = "contains",
) -> float:
    """Score 1.0 iff a command in the substrate exits as expected and prints what is expected.

    ```python
    @env.reward()
    async def tests_pass(shell: ShellServer) -> float:
        return await graders.command("pytest -q", shell=shell, expect_output="passed")
    ```

    Args:
        cmd, shell, cwd, timeout: as for `run`.
        expect_exit: the exit code wanted; None ignores it.
        expect_output: what stdout must show; None ignores it.
        match: how stdout is checked: `contains` (a substring), `regex` (`re.search`,
            multiline) or `exact` (equal once surrounding whitespace is stripped).

    Returns:
        1.0 when every check holds, else 0.0; a command that timed out scores 0.0.

    Raises:
        ValueError: nothing to check (both expectations None), or an unknown `match`.
    """
    if expect_exit is None and expect_output is None:
        raise ValueError("graders.command checks nothing: give expect_exit or expect_output")
    if match not in ("contains", "regex", "exact"):
        raise ValueError(f"match is 'contains', 'regex' or 'exact', not {match!r}")
    result = await run(cmd, shell=shell, cwd=cwd, timeout=timeout)
    exited = expect_exit is None or result.exit_code == expect_exit
    printed = expect_output is None or _matches(result.stdout, expect_output, match)
    return 1.0 if exited and printed and not result.timed_out else 0.0


def _matches(output: str, expected: str, match: Match) -> bool:
    """Whether `output` shows `expected` the way `match` says."""
    if match == "regex":
        return re.search(expected, output, re.MULTILINE) is not None
    if match == "exact":
        return output.strip() == expected.strip()
    return expected in output


async def run_uv_script(
    script: str,
    args: Iterable[object] = (),
    *,
    timeout: float = 300.0,  # noqa: ASYNC109 - kills the process group, not the await
    env: Mapping[str, str] | None = None,
    offline: bool | None = None,
    cwd: str | os.PathLike[str] | None = None,
    python: str | None = None,
) -> ShellResult:
    """Run a Python script with inline dependencies (PEP 723) through `uv run --script`.

    ```python
    VERIFY = '''# /// script
    # dependencies = ["math-verify"]
    # ///
    import sys
    from math_verify import parse, verify
    print(float(verify(parse(sys.argv[1]), parse(sys.argv[2]))))
    '''
    result = await graders.run_uv_script(VERIFY, [expected, answer])
    ```

    The script is written to this user's private folder of scripts (`SCRIPTS`, mode
    0700), named after its content, and run by the `uv` of the `uv` PyPI package
    (else the one on PATH) in a fresh private folder. Its dependencies land in uv's
    cache (`UV_CACHE_DIR`, else `~/.cache/uv`) and an environment uv keeps there for
    that script (made once, reused by every later run): never in this interpreter's.
    It sees only `UV_ENV` of this process's variables, and `env`; uv trusts the
    system's certificate store (`UV_SYSTEM_CERTS=1` unless set), as pip does.

    Args:
        script: the script's source, with its `# /// script` header.
        args: command-line arguments (each converted with `str`).
        timeout: seconds for the whole run, installing included.
        env: more variables for the script (and uv).
        offline: True: uv only uses its cache (`--offline`); False: it may reach the
            index; None: as `UV_OFFLINE` says.
        cwd: the script's working directory (default: a fresh private folder,
            removed afterwards).
        python: the interpreter uv builds the environment from (default `UV_PYTHON`
            when set, else this process's).

    Returns:
        What the run did: `exit_code`, `stdout`, `stderr` (uv's messages too),
        `timed_out`, `truncated`.

    Raises:
        FileNotFoundError: uv is not installed, or `cwd` is not a directory.
        PermissionError: `SCRIPTS` exists but is not a private folder of this user.
    """
    uv = uv_binary()
    path = _write_script(script)
    folder = owned_tempdir("uv-script")
    try:
        argv = [uv, "run", "--no-progress", *(["--offline"] if offline else [])]
        argv += [*_python_flag(python), "--script", path, *map(str, args)]
        where = _directory(folder if cwd is None else os.fspath(cwd))
        return await _exec(argv, where, _uv_environ(env, offline), timeout, MAX_OUTPUT)
    finally:
        shutil.rmtree(folder, ignore_errors=True)


def uv_binary() -> str:
    """The `uv` executable: the `uv` package's (`uv.find_uv_bin()`), else PATH's.

    Raises:
        FileNotFoundError: neither has one.
    """
    with contextlib.suppress(ImportError, FileNotFoundError):
        found: str = importlib.import_module("uv").find_uv_bin()
        return found
    on_path = shutil.which("uv")
    if on_path is None:
        raise FileNotFoundError(
            "run_uv_script needs uv: install it in the environment's Python"
            " (pip install uv) or put a uv binary on PATH"
        )
    return on_path


def _directory(where: str | None) -> str | None:
    """`where`, checked to be a directory (None: the current one)."""
    if where is not None and not os.path.isdir(where):
        raise FileNotFoundError(f"cwd {where!r} is not a directory")
    return where


def _write_script(script: str) -> str:
    """The path of `script` in `SCRIPTS`, written there (atomically) unless it is already.

    One path per content, so uv finds the environment it made for the script before
    (uv keys a script's environment by its path) instead of making one per run.
    """
    folder = _private(SCRIPTS)
    data = script.encode()
    path = os.path.join(folder, f"script-{hashlib.sha256(data).hexdigest()[:20]}.py")
    if not os.path.exists(path):
        fd, part = tempfile.mkstemp(dir=folder, suffix=".part")
        try:
            with os.fdopen(fd, "wb") as file:
                file.write(data)
            os.replace(part, path)
        except BaseException:
            with contextlib.suppress(OSError):
                os.unlink(part)
            raise
    return path


def _private(folder: str) -> str:
    """`folder`, made with mode 0700 if missing, checked to be this user's alone."""
    with contextlib.suppress(FileExistsError):
        os.mkdir(folder, 0o700)
    info = os.lstat(folder)
    mine = stat.S_ISDIR(info.st_mode) and info.st_uid == os.geteuid()
    if not mine or info.st_mode & 0o077:
        raise PermissionError(f"{folder} is not a private folder of this user: remove it")
    return folder


def _python_flag(python: str | None) -> list[str]:
    if python is None and os.environ.get("UV_PYTHON"):
        return []  # uv reads it itself
    return ["--python", python or sys.executable]


def _uv_environ(env: Mapping[str, str] | None, offline: bool | None) -> dict[str, str]:
    """What uv and the script see: `UV_ENV` of ours, then `env`; uv trusts the system's
    certificates (as pip does) unless told otherwise."""
    keep = UV_ENV | ({"UV_OFFLINE"} if offline is None else set())
    base = {k: v for k, v in os.environ.items() if k in keep}
    return {"UV_SYSTEM_CERTS": "1", **base, **(env or {})}


async def _exec(
    argv: Sequence[str], cwd: str | None, env: dict[str, str], limit: float, cap: int
) -> ShellResult:
    """Run `argv` as the leader of a new process group; kill the group when done."""
    loop = asyncio.get_running_loop()
    proc = _Process(cap, loop)
    t0 = time.monotonic()
    transport, _ = await loop.subprocess_exec(
        lambda: proc,
        *argv,
        stdin=asyncio.subprocess.DEVNULL,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
        cwd=cwd,
        env=env,
        start_new_session=True,
    )
    pgid = transport.get_pid()
    try:
        timed_out = await proc.finish(pgid, limit, _LINGER)
    finally:
        await _end(pgid, proc, transport)
    stdout, cut_out = proc.stdout.text()
    stderr, cut_err = proc.stderr.text()
    code = transport.get_returncode()
    assert code is not None  # `finish` returned, so the process has exited
    elapsed = round(time.monotonic() - t0, 6)
    return ShellResult(code, stdout, stderr, timed_out, cut_out or cut_err, elapsed)


async def _end(pgid: int, proc: _Process, transport: asyncio.SubprocessTransport) -> None:
    """Kill what is left of the group, reap the leader (even when cancelled) and close."""
    _killpg(pgid)
    try:
        with contextlib.suppress(TimeoutError):
            async with asyncio.timeout(2):
                await asyncio.shield(proc.exited)
    finally:
        transport.close()
