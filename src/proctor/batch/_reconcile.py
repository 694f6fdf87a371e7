"""`reconcile`: remove what a batch left behind (containers, Ray actors, processes, folders).

Everything a batch starts carries its `batch_id`: containers the label `proctor.batch`,
Ray actors the namespace `proctor-<batch_id>`, server processes `PROCTOR_BATCH_ID` in
their environment, and the temp folders of its runners their owner's pid and start
time (`proctor._tempdirs`). The runner calls `reconcile` at exit (also after Ctrl-C);
`proctor batch reconcile OUT` calls it after the runner was killed.

The runners are those `batch.json` and the `runner` events name. A folder is removed
only when its runner is gone (its pid too, or reused by a later process); containers,
actors and processes only when no runner other than the caller still runs the batch.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import re
import shutil
import signal
import socket
import stat
import tempfile
import threading
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TypeVar

import orjson

from .._errors import RuntimeLaunchError, StoreError
from .._tempdirs import owner
from ..store import read_batch

__all__ = ["BATCH_ENV", "reconcile", "reconcile_sync"]

BATCH_ENV = "PROCTOR_BATCH_ID"
"""The environment variable every server process of a batch carries (its batch id)."""

_OWNED = re.compile(r"proctor-.+-(\d+)-(\d+)-[a-z0-9_]+")  # `_tempdirs.owned_tempdir`
_ENGINES = ("podman", "docker")
_PROBE_TIMEOUT = 5.0  # seconds to connect to a Ray cluster's address
_RAY_TIMEOUT = 60.0  # seconds to connect to Ray and kill the batch's actors
_T = TypeVar("_T")


@dataclass
class _Runners:
    """The batch's runner processes, sorted by what may be removed on their behalf."""

    dead: set[str] = field(default_factory=set)  # "PID-START" of runners that are gone
    running: list[str] = field(default_factory=list)  # runners still at it, described


async def reconcile(out: str | os.PathLike[str], *, final: bool = True) -> dict[str, Any]:
    """Remove what the batch written in `out` left behind; return what was removed.

    Temp folders of runners that are gone are always removed, a live runner's never.
    With `final` (the batch is over: the runner at exit, or after a kill) the
    batch's containers, Ray actors and labelled processes go too, unless a runner
    other than the caller still runs it. With `final=False` the caller is a runner
    that goes on, and only dead runners' folders are removed. What could not be done
    is listed under `errors`; the caller records the `reconciled` event.

    Returns:
        `{"batch_id", "removed": {"containers", "ray_actors", "temp_dirs",
        "processes"}, "errors"}`.

    Raises:
        StoreError: `out` has no readable `batch.json` or it names no batch id.
    """
    doc = read_batch(out)
    batch_id = doc.get("batch_id")
    if not isinstance(batch_id, str) or not batch_id:
        raise StoreError(f"{out}/batch.json has no batch_id")
    runners = _runners(out, doc, final=final)
    removed: dict[str, list[Any]] = {
        "containers": [],
        "ray_actors": [],
        "temp_dirs": _remove_folders(runners.dead),
        "processes": [],
    }
    errors: list[str] = []
    if not final:  # the caller goes on: what is labelled may still be in use
        return {"batch_id": batch_id, "removed": removed, "errors": errors}
    if runners.running:
        errors.append(
            f"{', '.join(runners.running)} still running this batch: its containers, "
            "Ray actors and processes are left"
        )
    else:
        runtime = (doc.get("config") or {}).get("runtime") or {}
        removed["processes"] = _kill_labelled(batch_id)
        removed["containers"] = await _remove_containers(batch_id, runtime, errors)
        removed["ray_actors"] = await _kill_actors(batch_id, runtime, errors)
    return {"batch_id": batch_id, "removed": removed, "errors": errors}


def reconcile_sync(out: str | os.PathLike[str], *, final: bool = True) -> dict[str, Any]:
    """`reconcile` in a fresh event loop (for the CLI)."""
    return asyncio.run(reconcile(out, final=final))


# -- runners ---------------------------------------------------------------------------


def _runners(out: str | os.PathLike[str], doc: dict[str, Any], *, final: bool) -> _Runners:
    """Sort the runners `batch.json` and the `runner` events name into dead and running."""
    found = _Runners()
    here, me = socket.gethostname(), owner(os.getpid())
    for pid, start, host in _runner_records(out, doc):
        ident = f"{pid}-{start}"
        if host is not None and host != here:
            found.running.append(f"runner {pid} on {host} (not checkable from {here})")
        elif owner(pid) != ident:
            found.dead.add(ident)
        elif ident != me or not final:
            found.running.append(f"runner {pid}")
    found.running = sorted(set(found.running))
    return found


def _runner_records(
    out: str | os.PathLike[str], doc: dict[str, Any]
) -> Iterator[tuple[int, int, str | None]]:
    """(pid, start time, host) of every runner process recorded for the batch."""
    for record in (doc.get("runner"), *_runner_events(out)):
        if not isinstance(record, dict):
            continue
        pid, start, host = record.get("pid"), record.get("start_time"), record.get("host")
        with contextlib.suppress(TypeError, ValueError):
            yield int(pid), int(start), host if isinstance(host, str) else None  # type: ignore[arg-type]


def _runner_events(out: str | os.PathLike[str]) -> Iterator[Any]:
    """The `runner` events of `events.jsonl`: only the lines that say `"runner"` are
    parsed (a batch has a few such lines among ~7 per rollout; parsing every line cost
    as much as a trivial rollout's recording). A torn last line is left out."""
    try:
        f = open(os.path.join(os.fspath(out), "events.jsonl"), "rb")  # noqa: SIM115
    except FileNotFoundError:
        return
    with f:
        for line in f:
            if b'"runner"' in line and line.endswith(b"\n"):
                with contextlib.suppress(orjson.JSONDecodeError):
                    event = orjson.loads(line)
                    if isinstance(event, dict) and event.get("type") == "runner":
                        yield event


# -- temp folders -------------------------------------------------------------------------


def _remove_folders(dead: set[str]) -> list[str]:
    """Remove this user's `proctor-<kind>-PID-START-*` temp folders of dead runners."""
    if not dead:
        return []
    folder = tempfile.gettempdir()
    try:
        entries = list(os.scandir(folder))
    except OSError:
        return []
    removed = []
    for entry in entries:
        match = _OWNED.fullmatch(entry.name)
        if match is None or f"{match[1]}-{match[2]}" not in dead:
            continue
        with contextlib.suppress(OSError):
            info = entry.stat(follow_symlinks=False)
            if stat.S_ISDIR(info.st_mode) and info.st_uid == os.geteuid():
                shutil.rmtree(entry.path)
                removed.append(entry.path)
    return sorted(removed)


# -- processes ------------------------------------------------------------------------------


def _kill_labelled(batch_id: str) -> list[int]:
    """SIGKILL the processes (with their groups) whose environment names the batch.

    The caller and its ancestors are spared. A group is killed whole only when its
    leader is labelled too; otherwise only the labelled process is.
    """
    spared = set(_ancestry(os.getpid()))
    labelled = {pid for pid in _labelled(batch_id) if pid not in spared}
    mine = os.getpgrp()
    killed = []
    for pid in sorted(labelled):
        with contextlib.suppress(ProcessLookupError, PermissionError):
            group = os.getpgid(pid)
            if group in labelled and group != mine:
                os.killpg(group, signal.SIGKILL)
            else:
                os.kill(pid, signal.SIGKILL)
            killed.append(pid)
    return killed


def _labelled(batch_id: str) -> Iterator[int]:
    """Live processes (readable by this user) with `PROCTOR_BATCH_ID=<batch_id>`."""
    needle = f"{BATCH_ENV}={batch_id}".encode()
    for entry in os.scandir("/proc"):
        if not entry.name.isdigit():
            continue
        try:
            environ = Path(entry.path, "environ").read_bytes()
        except OSError:  # gone, or another user's
            continue
        if needle in environ.split(b"\0") and owner(int(entry.name)) is not None:
            yield int(entry.name)


def _ancestry(pid: int) -> Iterable[int]:
    """`pid` and its parents up to the root of this pid namespace."""
    while pid > 0:
        yield pid
        try:
            text = Path(f"/proc/{pid}/stat").read_text()
        except OSError:
            return
        pid = int(text[text.rindex(")") + 2 :].split()[1])


# -- substrates ------------------------------------------------------------------------------


async def _remove_containers(
    batch_id: str, runtime: dict[str, Any], errors: list[str]
) -> list[str]:
    """Remove the containers labelled `proctor.batch=<batch_id>` (and their socket folders).

    Under a container runtime its engine must answer, or that is an error; otherwise
    each engine installed here is asked, and one that does not answer is skipped. Under
    a compose runtime the batch's networks go too (their names listed after the ids).
    """
    from ..runtimes import ComposeRuntime, ContainerRuntime

    own = runtime.get("kind") in ("container", "compose")
    cleaner = ComposeRuntime if runtime.get("kind") == "compose" else ContainerRuntime
    engines: list[Any] = (
        [runtime.get("engine")] if own else [e for e in _ENGINES if shutil.which(e)]
    )
    removed: list[str] = []
    for engine in engines:
        try:
            removed += await cleaner(batch=batch_id, engine=engine).reconcile()
        except (RuntimeLaunchError, ValueError) as exc:
            if own:
                errors.append(f"containers: {exc}")
    return removed


async def _kill_actors(batch_id: str, runtime: dict[str, Any], errors: list[str]) -> list[str]:
    """Kill the batch's Ray actors on the config's cluster (only under a Ray runtime)."""
    if runtime.get("kind") != "ray":
        return []
    try:
        import ray  # noqa: F401
    except ImportError:
        errors.append("ray_actors: Ray is not installed; the batch's actors were not checked")
        return []
    address = runtime.get("address") or os.environ.get("RAY_ADDRESS") or "auto"
    try:
        _probe(address)
        return await _in_thread(_kill_actors_sync, batch_id, address)
    except Exception as exc:  # unreachable cluster, or Ray failing: reported, never raised
        errors.append(f"ray_actors: Ray at {address}: {type(exc).__name__}: {exc}")
        return []


def _probe(address: str) -> None:
    """Fail fast when nothing listens at a `host:port` address (Ray would retry for long).

    Raises:
        OSError: the connection failed.
    """
    host, sep, port = address.split("://")[-1].rpartition(":")
    if sep and port.isdigit():
        socket.create_connection((host.strip("[]"), int(port)), timeout=_PROBE_TIMEOUT).close()


async def _in_thread(fn: Callable[..., _T], *args: Any) -> _T:
    """`fn(*args)` in a daemon thread, given up after `_RAY_TIMEOUT` (Ray's calls block).

    A daemon thread, not the loop's executor: a call that hangs must not hold up the
    loop's shutdown, nor the process's exit.
    """
    loop = asyncio.get_running_loop()
    done: asyncio.Future[_T] = loop.create_future()

    def settle(result: Any, exc: BaseException | None) -> None:
        if done.done():
            return
        if exc is not None:
            done.set_exception(exc)
        else:
            done.set_result(result)

    def run() -> None:
        try:
            result, exc = fn(*args), None
        except BaseException as error:
            result, exc = None, error
        with contextlib.suppress(RuntimeError):  # the loop is closed: nobody waits
            loop.call_soon_threadsafe(settle, result, exc)

    threading.Thread(target=run, name="proctor-reconcile", daemon=True).start()
    try:
        async with asyncio.timeout(_RAY_TIMEOUT):
            return await done
    except TimeoutError:
        raise TimeoutError(f"no answer within {_RAY_TIMEOUT:g}s") from None


def _kill_actors_sync(batch_id: str, address: str) -> list[str]:
    """Connect (unless connected), kill every actor named in the batch's namespace."""
    import ray

    from ..runtimes._ray import actor_namespace

    namespace = actor_namespace(batch_id)
    connected = ray.is_initialized()
    if not connected:
        ray.init(address=address, log_to_driver=False, logging_level=logging.ERROR)
    try:
        killed = []
        for actor in ray.util.list_named_actors(all_namespaces=True):
            if actor["namespace"] != namespace:
                continue
            with contextlib.suppress(ValueError):  # gone meanwhile
                ray.kill(ray.get_actor(actor["name"], namespace=namespace), no_restart=True)
                killed.append(f"{namespace}/{actor['name']}")
        return killed
    finally:
        if not connected:
            ray.shutdown()
