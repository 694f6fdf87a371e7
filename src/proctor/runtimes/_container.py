"""`ContainerRuntime`: each rollout's environment in its own container (podman or docker)."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import math
import os
import re
import secrets
import shutil
import signal
import tempfile
from collections.abc import AsyncIterator, Awaitable, Callable, Mapping, Sequence
from contextlib import AbstractAsyncContextManager
from pathlib import Path
from typing import TYPE_CHECKING, Any

from .._errors import RuntimeLaunchError
from .._resource import AsyncResource
from ._base import Endpoint, Runtime, exit_cause
from ._container_spec import NAME, SOCKET, SOCKET_DIR, ContainerSpec, Engine
from ._enter import SubstrateEntry
from ._process import MARK, REAP, Tail, check_teardown, killpg, parse_report

if TYPE_CHECKING:
    from ..records import Task

__all__ = [
    "SOCKET",
    "ContainerRuntime",
    "ContainerSpec",
    "Engine",
    "labelled",
    "resolve_engine",
    "rollout_of",
    "undo",
]

log = logging.getLogger("proctor.runtimes.container")

_ANNOUNCE = re.compile(rb"^(PROCTOR_SERVE_PORT|HUD_SERVE_PORT|PROCTOR_SERVE_UNIX)=(.*)$")
_MAX_UNIX_PATH = 107  # bytes in a Unix socket path (sun_path less its NUL)
_CLI_TIMEOUT = 60.0
_GIVE_UP = 1.0  # seconds a client creating a container gets to give up on SIGTERM
_CLIENT_OUTPUT = 1.0  # seconds to read a gone client's last output (it relays the server's)
_PORT_TAKEN = "address already in use"
_PORT_ATTEMPTS = 3  # seconds an engine command (rm, ps, port) may take


def resolve_engine(engine: Engine | None = None) -> list[str]:
    """The engine CLI to run: `engine`, or podman, else docker, found on `PATH`.

    Raises:
        ValueError: `engine` is not "podman", "docker" or None.
        RuntimeLaunchError: no such CLI is installed.
    """
    if engine not in (None, "podman", "docker"):
        raise ValueError(f"engine must be 'podman', 'docker' or None, not {engine!r}")
    for name in [engine] if engine else ["podman", "docker"]:
        path = shutil.which(name)
        if path:
            return [path]
    raise RuntimeLaunchError(f"no container engine: {engine or 'podman or docker'} not on PATH")


class ContainerRuntime(Runtime, AsyncResource):
    """Serve each rollout's environment in its own container, removed at teardown.

    The container runs `python -m proctor.serve SOURCE` (or `command`) from `image`,
    and is ready when it prints where it serves on stdout. With `network="none"` (the
    default) it has no network at all: it serves on a Unix socket in a private folder
    of this machine mounted at `/run/proctor` (`$PROCTOR_SOCKET` in the container),
    and the endpoint is `unix:///...` on that folder. With a named network (such as
    "bridge") it serves on `port` with a fresh token (`$PROCTOR_TOKEN`), published on
    127.0.0.1 only; such a container reaches whatever that network reaches, so keep
    untrusted code on "none". A `command` must do the same and print
    `PROCTOR_SERVE_UNIX=<path>` or `PROCTOR_SERVE_PORT=<port>` (`HUD_SERVE_PORT=`) when
    it serves.

    Containers run with every capability dropped and `no-new-privileges`, and are never
    pulled: build or load the image first (`python_image()` makes one of this
    interpreter and proctor, no registry needed). Every container carries the labels
    `proctor.batch` (this runtime's `batch`) and `proctor.rollout`; leaving
    `async with runtime` or calling `reconcile()` removes any the batch left behind,
    including after a crash. A task's `runtime_config` may name its own `image` and
    `resources`.

    Args:
        spec: the whole `ContainerSpec`, or the image to run (default: the task's
            `runtime_config["image"]`).
        source: environment source path inside the image, for `proctor.serve`.
        **fields: the other fields of `ContainerSpec` (`command`, `network`,
            `resources`, `batch`, ...), by keyword.

    Raises:
        ValueError: an argument is malformed (the message names it).
        TypeError: an unknown keyword, or a `ContainerSpec` with other arguments.
        RuntimeLaunchError: no such engine is installed.
    """

    def __init__(
        self, spec: ContainerSpec | str | None = None, source: str | None = None, **fields: Any
    ) -> None:
        if isinstance(spec, ContainerSpec):
            if source is not None or fields:
                raise TypeError("ContainerRuntime(spec) takes no other arguments")
        else:
            if spec is not None:
                if "image" in fields:
                    raise TypeError("ContainerRuntime got the image twice")
                fields["image"] = spec
            if source is not None:
                fields["source"] = source
            spec = ContainerSpec(**fields)
        self.spec = spec
        self.batch = spec.batch or secrets.token_hex(6)
        self._exe = resolve_engine(spec.engine)

    def __repr__(self) -> str:
        return f"ContainerRuntime({self.spec.image!r}, batch={self.batch!r})"

    def __call__(self, task: Task) -> AbstractAsyncContextManager[Endpoint]:
        return self._endpoint(task)

    async def aclose(self) -> None:
        """Remove this runtime's containers still there (`reconcile`)."""
        await self.reconcile()

    @property
    def engine_name(self) -> str:
        """The engine CLI in use ("podman" or "docker")."""
        return Path(self._exe[0]).name

    @contextlib.asynccontextmanager
    async def _endpoint(self, task: Task) -> AsyncIterator[Endpoint]:
        for attempt in range(1, _PORT_ATTEMPTS + 1):
            container = _Container(self, task)
            try:
                endpoint = await container.start()
                break
            except RuntimeLaunchError as exc:
                await container.stop()
                # The engine picks a free host port, then binds it; between the two,
                # another process may take it. A fresh container picks again.
                if attempt == _PORT_ATTEMPTS or _PORT_TAKEN not in str(exc):
                    raise
                log.debug("%s: host port taken; starting a fresh container", container.name)
            except BaseException as exc:
                await undo(exc, container.stop, f"stopping {container.name}")
                raise
        try:
            yield endpoint
        finally:
            await container.stop()
        check_teardown(container.teardown_error)

    async def reconcile(self, labels: Mapping[str, str | None] | None = None) -> list[str]:
        """Remove every container carrying `labels` (default: this runtime's batch).

        A label given as None matches any value: `{"proctor.batch": None}` removes
        the containers of every proctor batch on this engine. For cleanup after a crash,
        `ContainerRuntime(batch=OLD).reconcile()` or pass the labels. Matched by its
        batch alone, a batch's socket folders on this machine go too.

        Returns:
            The ids of the containers removed.

        Raises:
            ValueError: `labels` is empty (that would match every container).
            RuntimeLaunchError: the engine failed.
        """
        labels = {"proctor.batch": self.batch} if labels is None else dict(labels)
        if not labels:
            raise ValueError("reconcile needs at least one label to match")
        ids = await labelled(self._exe, ("ps", "-a"), labels)
        if ids:
            code, _, err = await _cli([*self._exe, "rm", "-f", *self._now(), *ids])
            if code != 0:
                raise RuntimeLaunchError(f"{self.engine_name} rm: {err.strip()}")
        batch = labels.get("proctor.batch")
        if labels.keys() == {"proctor.batch"} and batch is not None and NAME.match(batch):
            rollouts = _socket_dir(batch, "[0-9a-f]" * 16)  # not those of batch "{batch}-x"
            for folder in rollouts.parent.glob(rollouts.name):
                shutil.rmtree(folder, ignore_errors=True)
        return ids

    async def release(self, url: str) -> None:
        """Remove the container serving `url` and its socket folder: a rollout a resumed
        runner adopted after the runner that started its container died.

        Raises:
            ValueError: `url` is not a Unix socket of one of this batch's containers.
            RuntimeLaunchError: the engine failed.
        """
        rollout = rollout_of(url, self.batch)
        try:
            await self._remove(f"proctor-{rollout}", self.spec.stop_timeout)
        finally:
            shutil.rmtree(Path(url.removeprefix("unix://")).parent, ignore_errors=True)

    def _now(self) -> list[str]:
        """`rm -f` options that kill without a grace period."""
        return ["-t", "0"] if self.engine_name == "podman" else []

    async def _remove(self, name: str, grace: float) -> bool:
        """Stop (SIGTERM, SIGKILL after `grace` s) and remove a container; False if absent."""
        seconds = str(math.ceil(grace))
        if self.engine_name == "podman":
            code, out, err = await _cli([*self._exe, "rm", "-f", "-t", seconds, name])
        else:
            await _cli([*self._exe, "stop", "-t", seconds, name])
            code, out, err = await _cli([*self._exe, "rm", "-f", name])
        if code == 0:
            return bool(out.strip())  # `rm -f` names what it removed; podman exits 0 on none
        if "no such container" in err.lower():
            return False
        raise RuntimeLaunchError(f"{self.engine_name} rm {name}: {err.strip()}")

    async def _host_port(self, name: str) -> int:
        """The 127.0.0.1 port published for the container's `port`."""
        _, out, err = await _cli([*self._exe, "port", name, f"{self.spec.port}/tcp"])
        for line in out.splitlines():
            host, _, port = line.strip().rpartition(":")
            if host == "127.0.0.1" and port.isdigit():
                return int(port)
        raise RuntimeLaunchError(f"{self.engine_name} port {name}: no port on 127.0.0.1: {err}")


class _Container:
    """One rollout's container: run it attached, read its announcement, remove it."""

    def __init__(self, runtime: ContainerRuntime, task: Task) -> None:
        self.runtime = runtime
        self.task = task
        self.rollout = runtime.spec._rollout_id()
        self.name = f"proctor-{self.rollout}"
        self.dir: str | None = None  # the Unix socket's folder on this machine
        # The engine client's working folder (also the socket's, on network "none"):
        # conmon writes an `oom` file into its working folder when the container is
        # OOM-killed, which was wherever the driver ran.
        self.folder = _socket_dir(runtime.batch, self.rollout)
        self.token = secrets.token_urlsafe(24)
        self.proc: asyncio.subprocess.Process | None = None
        self.readers: list[asyncio.Task[None]] = []
        self.tail = Tail(f"{runtime.engine_name} container {self.name}")
        self.teardown_error: str | None = None  # what its shutdown hooks said, if they failed
        self.where: asyncio.Future[bytes] = asyncio.get_running_loop().create_future()
        self.death: asyncio.Future[str] = asyncio.get_running_loop().create_future()
        self.stopping = False

    async def start(self) -> Endpoint:
        """Run the container and wait for its announcement.

        Raises:
            RuntimeLaunchError: the engine failed, the container exited first or
                stayed silent for `startup_timeout`.
        """
        runtime, spec = self.runtime, self.runtime.spec
        env = {**os.environ, **spec.env, "PYTHONUNBUFFERED": "1"}
        folder = self.folder
        os.mkdir(folder, 0o700)
        if spec.network == "none":
            if len(f"{folder}/{Path(SOCKET).name}") > _MAX_UNIX_PATH:
                raise RuntimeLaunchError(f"the socket path in {folder} is too long: set TMPDIR")
            self.dir = str(folder)
            env["PROCTOR_SOCKET"] = SOCKET
        else:
            env["PROCTOR_TOKEN"] = self.token
        argv = spec.run_argv(
            runtime._exe, self.task, runtime.batch, self.name, self.rollout, self.dir
        )
        try:
            self.proc = await asyncio.create_subprocess_exec(
                *argv,
                stdin=asyncio.subprocess.DEVNULL,
                stdout=asyncio.subprocess.PIPE,
                stderr=asyncio.subprocess.PIPE,
                env=env,
                cwd=folder,
                start_new_session=True,
            )
        except OSError as exc:
            raise RuntimeLaunchError(f"cannot start {argv[0]}: {exc}") from exc
        assert self.proc.stdout is not None and self.proc.stderr is not None
        self.readers = [
            asyncio.create_task(self._read(self.proc.stdout, 1)),
            asyncio.create_task(self._read(self.proc.stderr, 2)),
        ]
        try:
            async with asyncio.timeout(spec.startup_timeout):
                kind, _, value = (await self.where).partition(b"=")
        except TimeoutError:
            raise RuntimeLaunchError(
                self.tail.why(f"no announcement within {spec.startup_timeout:g}s")
            ) from None
        return await self._endpoint(kind, value.decode(errors="replace").strip())

    async def _endpoint(self, kind: bytes, value: str) -> Endpoint:
        if kind == b"PROCTOR_SERVE_UNIX":
            if self.dir is None:
                raise RuntimeLaunchError(self.tail.why(f"a Unix socket {value} off network 'none'"))
            inside = Path(value)
            if inside.parent != Path(SOCKET_DIR):
                raise RuntimeLaunchError(self.tail.why(f"socket {value} is not in {SOCKET_DIR}"))
            return Endpoint(f"unix://{self.dir}/{inside.name}", died=self.death, entry=self.entry())
        if self.dir is not None:
            raise RuntimeLaunchError(
                self.tail.why(
                    f"announced port {value}, but network 'none' has no ports: "
                    "serve on $PROCTOR_SOCKET"
                )
            )
        port = self.runtime.spec.port
        if value != str(port):
            raise RuntimeLaunchError(self.tail.why(f"serves port {value}, not {port}"))
        host_port = await self.runtime._host_port(self.name)
        return Endpoint(
            f"tcp://127.0.0.1:{host_port}", token=self.token, died=self.death, entry=self.entry()
        )

    def entry(self) -> SubstrateEntry:
        """`podman exec -i` (or docker's) into this container, as its user, in its workdir."""
        spec = self.runtime.spec
        python = spec.command[0] if spec.command else "python"
        prefix = (*self.runtime._exe, "exec", "-i", self.name)
        return SubstrateEntry("container", prefix, python, None, _client_env(), {}, spec.network)

    async def _read(self, stream: asyncio.StreamReader, fd: int) -> None:
        """Route one output stream: the announcement, then lines to the log."""
        while True:
            try:
                line = await stream.readline()
            except ValueError:  # a line beyond the reader's limit: it was dropped
                line = b"(a line too long to log)\n"
            if not line:
                break
            line = line.rstrip(b"\n")
            if fd == 1 and not self.where.done() and (match := _ANNOUNCE.match(line)):
                self.where.set_result(match.group(0))
                continue
            if fd == 2:
                if line.startswith(MARK):  # one server per container
                    self.teardown_error = parse_report(line)[1]
                self.tail.add(line)
            if log.isEnabledFor(logging.DEBUG):
                log.debug("[%s %s] %s", self.name, fd, line.decode(errors="replace"))
        if fd == 1 and not self.where.done():
            await self._exited()
        elif fd == 1:
            await self._died()

    async def _died(self) -> None:
        """The container ended after it served: say how (`Endpoint.died`), unless we
        stopped it."""
        assert self.proc is not None
        code = await self.proc.wait()
        if self.stopping:
            return
        what = f"container {self.name}"
        cause = exit_cause(what, 128 - code if 128 < code < 128 + signal.NSIG else code)
        with contextlib.suppress(Exception):  # the cause stays as good as it can be
            _, out, _ = await _cli(
                [*self.runtime._exe, "inspect", "--format", "{{.State.OOMKilled}}", self.name]
            )
            if out.strip() == "true":
                cause = f"{what} OOM-killed (out of memory)"
        if not self.death.done():
            self.death.set_result(cause)

    async def _exited(self) -> None:
        """Stdout closed without an announcement: fail the start once stderr is read."""
        assert self.proc is not None
        code = await self.proc.wait()
        await asyncio.gather(*self.readers[1:], return_exceptions=True)
        if not self.where.done():
            why = self.tail.why(f"exited with code {code} before announcing where it serves")
            self.where.set_exception(RuntimeLaunchError(why))

    async def stop(self) -> None:
        """Remove the container, reap the client, delete the socket folder.

        A container that announced gets SIGTERM and `stop_timeout` to run its shutdown
        hooks. One still starting may be half-created by its client, and an engine can
        lose a removal that races the creation: the client gets SIGTERM first (it gives
        up, or passes the signal on), and the container is removed once the client is
        gone, when nothing can create it any more.
        """
        runtime, proc = self.runtime, self.proc
        self.stopping = True
        served = self.where.done() and not self.where.cancelled()
        if served and self.where.exception() is not None:
            served = False  # a launch failure, already raised (now marked seen)
        try:
            if proc is None:
                return
            if served:  # running, or exited on its own: removed either way
                await runtime._remove(self.name, runtime.spec.stop_timeout)
            elif proc.returncode is None:
                killpg(proc.pid, signal.SIGTERM)
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(proc.wait(), _GIVE_UP)
                # Best effort: the engine may still be cleaning up ("device or resource
                # busy"); the removal once the client is reaped, below, is the one that counts.
                with contextlib.suppress(RuntimeLaunchError):
                    await runtime._remove(self.name, 0)
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(proc.wait(), REAP)  # it ends with its container
            if proc.returncode is None:
                killpg(proc.pid, signal.SIGKILL)
                await proc.wait()
            if not served:
                await runtime._remove(self.name, 0)
        finally:
            if self.readers and proc is not None and proc.returncode is not None:
                # The client is gone: its pipes are at EOF, and its last lines (a failed
                # shutdown hook's report) are still worth reading.
                await asyncio.wait(self.readers, timeout=_CLIENT_OUTPUT)
            for reader in self.readers:
                reader.cancel()
            await asyncio.gather(*self.readers, return_exceptions=True)
            shutil.rmtree(self.folder, ignore_errors=True)


async def undo(exc: BaseException, stop: Callable[[], Awaitable[object]], what: str) -> None:
    """Run `stop` while `exc` propagates: a failure of it is a note on `exc` ("and WHAT
    failed: ..."), never raised in place of the cancellation or error."""
    try:
        await stop()
    except Exception as failed:
        exc.add_note(f"and {what} failed: {failed}")


def rollout_of(url: str, batch: str) -> str:
    """The rollout id of the container of `batch` serving `url` (its socket's folder).

    Raises:
        ValueError: `url` is not a Unix socket of one of the batch's containers.
    """
    folder = Path(url.removeprefix("unix://")).parent
    prefix = f"proctor-{batch}-"
    rollout = folder.name.removeprefix(prefix)
    if not folder.name.startswith(prefix) or not re.fullmatch("[0-9a-f]{16}", rollout):
        raise ValueError(f"{url} is not served by a container of batch {batch!r}")
    return rollout


async def labelled(
    exe: Sequence[str], kind: Sequence[str], labels: Mapping[str, str | None]
) -> list[str]:
    """What the engine's listing `kind` (`ps -a`, `network ls`) names of what carries
    `labels` (a label given as None matches any value): ids, or network names.

    Raises:
        RuntimeLaunchError: the engine failed.
    """
    filters = [f"--filter=label={k}" + ("" if v is None else f"={v}") for k, v in labels.items()]
    code, out, err = await _cli([*exe, *kind, "-q", *filters])
    if code != 0:
        raise RuntimeLaunchError(f"{Path(exe[0]).name} {' '.join(kind)}: {err.strip()}")
    return out.split()


def _client_env() -> dict[str, str]:
    """The engine client's environment for an `exec`: the driver's (the client needs its
    runtime folders), which the engine never passes into the container."""
    return dict(os.environ)


def _socket_dir(batch: str, rollout: str) -> Path:
    """One rollout's folder on this machine: the engine client's working folder and, on
    network "none", its Unix socket's."""
    return Path(tempfile.gettempdir(), f"proctor-{batch}-{rollout}")


async def _cli(argv: list[str], limit: float = _CLI_TIMEOUT) -> tuple[int, str, str]:
    """Run an engine command to completion: (exit code, stdout, stderr); killed and
    `TimeoutError` after `limit` seconds."""
    proc = await asyncio.create_subprocess_exec(
        *argv,
        stdin=asyncio.subprocess.DEVNULL,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
    )
    try:
        async with asyncio.timeout(limit):
            out, err = await proc.communicate()
    except BaseException:
        with contextlib.suppress(ProcessLookupError):
            proc.kill()
        await proc.wait()
        raise
    assert proc.returncode is not None
    return proc.returncode, out.decode(errors="replace"), err.decode(errors="replace")
