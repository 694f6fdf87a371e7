"""The conformance environment that `check_runtime` and `check_env_server` drive.

Serve it like any environment: `python -m proctor.serve SOURCE`, where `SOURCE` (below)
is this file. Its rows are `env.echo(text=...)` and `env.slow(seconds=...)`.

Templates:
    echo(text, marker=""): the prompt is `text`; an exact echo grades 1.0, else 0.0;
        its reference solution (`tasks.solve`) is `text`.
    slow(seconds, marker=""): sleeps `seconds` before the prompt, then grades 1.0.

When a row's `marker` names a directory, the environment leaves files there, so that a
checker in another process can see what happened inside the substrate:

    task-<id>.start          a task started: JSON {pid, pidns, starttime, instance}
    task-<id>.closed         that task's generator finished (its `finally` ran)
    env-<instance>.shutdown  the shutdown hooks of that environment instance ran

Each start of the environment (its initialize hooks) is a new instance. The module is
also loaded by path as a top-level module, so it imports only absolute names.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import uuid
from collections.abc import AsyncGenerator, Iterator
from pathlib import Path
from typing import Any

from proctor._tempdirs import stat_fields
from proctor.env import Environment

__all__ = ["SOURCE", "env", "process_identity"]

SOURCE = __file__
"""This file: the source to serve (`SubprocessRuntime(SOURCE)`, `proctor serve SOURCE`)."""

env = Environment("conformance")


class _State:
    instance = uuid.uuid4().hex[:12]  # replaced by each initialize
    dirs: set[str] = set()  # marker directories seen by this instance


@env.initialize
def _initialize() -> None:
    _State.instance = uuid.uuid4().hex[:12]
    _State.dirs = set()


@env.shutdown
def _shutdown() -> None:
    dirs, _State.dirs = _State.dirs, set()
    for folder in sorted(dirs):
        _write(folder, f"env-{_State.instance}.shutdown", process_identity())


def _echo_solution(task: Any) -> str:
    return str(task.text)


@env.template(solution=_echo_solution)
async def echo(text: str, marker: str = "") -> AsyncGenerator[Any, Any]:
    """Repeat the prompt exactly."""
    with _tracked(marker):
        answer = yield text
        yield 1.0 if answer == text else 0.0


@env.template
async def slow(seconds: float, marker: str = "") -> AsyncGenerator[Any, Any]:
    """Sleep before giving the prompt (for timeouts and cancellation)."""
    with _tracked(marker):
        await asyncio.sleep(seconds)
        yield f"slept {seconds:g}s"
        yield 1.0


def process_identity() -> dict[str, Any]:
    """This process as another process on the same machine can recognise it.

    `pidns` (the pid namespace) tells whether `pid` means the same process to the
    reader; `starttime` (clock ticks since boot) tells a live process from a reused pid.
    Both are None where `/proc` is unavailable.
    """
    try:
        pidns: str | None = os.readlink("/proc/self/ns/pid")
    except OSError:
        pidns = None
    return {"pid": os.getpid(), "pidns": pidns, "starttime": starttime(os.getpid())}


def starttime(pid: int) -> int | None:
    """The start time of process `pid` from `/proc` (None if gone or unknown)."""
    fields = stat_fields(pid)
    return None if fields is None else int(fields[19])


@contextlib.contextmanager
def _tracked(marker: str) -> Iterator[None]:
    if not marker:
        yield
        return
    _State.dirs.add(marker)
    name = f"task-{uuid.uuid4().hex}"
    _write(marker, f"{name}.start", {**process_identity(), "instance": _State.instance})
    try:
        yield
    finally:
        _write(marker, f"{name}.closed", {})


def _write(folder: str, name: str, data: dict[str, Any]) -> None:
    # Atomic, so a reader never sees half a file; a folder this process cannot see
    # (another machine, a private /tmp) is simply not marked.
    with contextlib.suppress(OSError):
        tmp = Path(folder, f".{name}.tmp")
        tmp.write_text(json.dumps(data))
        os.replace(tmp, Path(folder, name))
