"""`ComposeRuntime`: each rollout's environment in a Compose project of its own."""

from __future__ import annotations

import asyncio
import contextlib
import ipaddress
import json
import logging
import math
import os
import secrets
import tempfile
from collections.abc import AsyncIterator, Mapping, Sequence
from contextlib import AbstractAsyncContextManager
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from .._errors import RuntimeLaunchError
from .._resource import AsyncResource
from ._base import Endpoint, Runtime
from ._compose_build import ImageBuilder
from ._compose_file import ComposeFile, Service, load_compose
from ._container import ContainerRuntime, resolve_engine
from ._container_spec import DEFAULT_ULIMITS, NAME, ContainerSpec, Engine, _resources

if TYPE_CHECKING:
    from ..records import Task

__all__ = ["ComposeRuntime"]

log = logging.getLogger("proctor.runtimes.compose")

_LIMIT_FLAGS = (("cpus", "--cpus"), ("memory", "--memory"), ("pids", "--pids-limit"))
_LOG_TAIL = 20  # lines of a failed service's output quoted in the error
_ENV_TIMEOUT = 60.0  # seconds an engine command (network, rm, exec, ...) may take
_FIRST_HOST = 10  # services get the subnet's addresses from its 10th host on
_GIVE_UP = 1.0  # seconds an engine client cut short gets to give up on SIGTERM


class ComposeRuntime(Runtime, AsyncResource):
    """Serve each rollout's environment in a fresh Compose project: its services on a
    private network with no route out, the environment server in the `main` service.

    Per rollout: an internal network (`podman network create --internal`), every
    service but `main` started in the order `depends_on` gives (waiting for
    `condition: service_healthy` by running the service's healthcheck, and for
    `service_completed_successfully`), each at an address of its own and reachable
    from the others by its service name (in every container's `/etc/hosts`), then
    `main` run as `ContainerRuntime` runs its one container: serving
    `python -m proctor.serve SOURCE` (or `command`) on a Unix socket in a private
    folder of this machine, which is the control channel. At teardown `main` stops
    first (its shutdown hooks run), then the other services, then the network; a
    bring-up that fails or is cancelled half-way removes what it started.

    Every container and the network carry the labels `proctor.batch` (this runtime's
    `batch`) and `proctor.rollout` (the project's id); `reconcile()` (also on leaving
    `async with runtime`) removes what the batch left behind. Containers run with every
    capability dropped (add some with `capabilities`) and `no-new-privileges`, and are
    never pulled. The Compose file is `compose`, or a task's
    `runtime_config["compose"]`; a task's `runtime_config["image"]` replaces `main`'s
    image and its `resources` limit `main`. docs/compose.md lists the keys read.

    Args:
        compose: the Compose file (checked now), unless each task names its own.
        source: environment source path inside `main`'s image, for `proctor.serve`.
        command: a full command for `main` instead (it must announce as
            `ContainerRuntime`'s does); with neither, `main`'s own command.
        env_name: which environment to serve when the source defines several.
        main: the service that serves the environment.
        engine: "podman" or "docker"; default: podman if installed, else docker.
        variables: values for `${NAME}` in Compose files (never this process's
            environment).
        capabilities: Linux capabilities every container keeps (`--cap-add`).
        resources: limits for every container, `{"cpus": 1, "memory": "512m", "pids": 256}`.
        batch: the `proctor.batch` label (default: a fresh id per runtime).
        labels: more labels for every container.
        oci_runtime: the engine's OCI runtime (`--runtime`), for builds and containers.
        ulimits: per-container limits, as `ContainerSpec.ulimits`.
        startup_timeout: seconds for the whole project to come up and `main` to serve.
        stop_timeout: seconds between SIGTERM and SIGKILL at teardown (a service's
            `stop_grace_period` overrides).
        build_timeout: seconds each `build` may take.

    Raises:
        ValueError: an argument or the Compose file is malformed (one line naming it).
        RuntimeLaunchError: no such engine is installed.
    """

    def __init__(
        self,
        compose: str | os.PathLike[str] | None = None,
        source: str | None = None,
        *,
        command: Sequence[str] | None = None,
        env_name: str | None = None,
        main: str = "main",
        engine: Engine | None = None,
        variables: Mapping[str, str] | None = None,
        capabilities: Sequence[str] = (),
        resources: Mapping[str, Any] | None = None,
        batch: str | None = None,
        labels: Mapping[str, str] | None = None,
        oci_runtime: str | None = None,
        ulimits: Mapping[str, int | tuple[int, int]] = DEFAULT_ULIMITS,
        startup_timeout: float = 120.0,
        stop_timeout: float = 5.0,
        build_timeout: float = 600.0,
    ) -> None:
        if source is not None and command is not None:
            raise ValueError("ComposeRuntime takes a source or a command, not both")
        if batch is not None and not NAME.match(batch):
            raise ValueError(f"batch must be letters, digits, '_', '.', '-': {batch!r}")
        self.main = main
        self.variables = dict(variables or {})
        self.file = None if compose is None else self._load(compose)
        self.batch = batch or secrets.token_hex(6)
        self._options = _Options(
            source=source, command=None if command is None else tuple(command),
            env_name=env_name, capabilities=tuple(capabilities),
            resources=_resources(resources or {}), labels=dict(labels or {}),
            oci_runtime=oci_runtime, ulimits=dict(ulimits), startup_timeout=startup_timeout,
            stop_timeout=stop_timeout,
        )  # fmt: skip
        self._exe = resolve_engine(engine)
        self._engine = engine
        self._files: dict[str, ComposeFile] = {}
        self._builder = ImageBuilder(self._exe, oci_runtime, build_timeout)

    def __repr__(self) -> str:
        where = self.file.path if self.file else "per task"
        return f"ComposeRuntime({where!r}, batch={self.batch!r})"

    def __call__(self, task: Task) -> AbstractAsyncContextManager[Endpoint]:
        return self._endpoint(task)

    async def aclose(self) -> None:
        """Remove this runtime's containers and networks still there (`reconcile`)."""
        await self.reconcile()

    async def reconcile(self, labels: Mapping[str, str | None] | None = None) -> list[str]:
        """Remove every container and network carrying `labels` (default: this
        runtime's batch), as `ContainerRuntime.reconcile` does for containers.

        Returns:
            The ids of the containers removed, then the names of the networks.

        Raises:
            ValueError: `labels` is empty.
            RuntimeLaunchError: the engine failed.
        """
        labels = {"proctor.batch": self.batch} if labels is None else dict(labels)
        containers = ContainerRuntime(batch=self.batch, engine=self._engine)
        removed = await containers.reconcile(labels)
        filters = [
            f"--filter=label={k}" + ("" if v is None else f"={v}") for k, v in labels.items()
        ]
        code, out, err = await _run([*self._exe, "network", "ls", "-q", *filters])
        if code != 0:
            raise RuntimeLaunchError(f"network ls: {err.strip()}")
        networks = out.split()
        for network in networks:
            await _remove_network(self._exe, network)
        return removed + networks

    def compose_file(self, task: Task) -> ComposeFile:
        """The checked Compose file `task` runs in (its `runtime_config["compose"]`,
        else this runtime's).

        Raises:
            RuntimeLaunchError: there is none, or it is malformed.
        """
        path = (task.runtime_config or {}).get("compose")
        if path is None:
            if self.file is None:
                raise RuntimeLaunchError(f"no Compose file for task {task.slug!r}")
            return self.file
        if not isinstance(path, str):
            raise RuntimeLaunchError(f"{task.slug}: runtime_config.compose must be a path")
        if path not in self._files:
            try:
                self._files[path] = self._load(path)
            except ValueError as exc:
                raise RuntimeLaunchError(str(exc)) from None
        return self._files[path]

    def _load(self, path: str | os.PathLike[str]) -> ComposeFile:
        """`load_compose`, its notes (keys ignored) logged once."""
        file = load_compose(path, main=self.main, variables=self.variables)
        for note in file.notes:
            log.warning("%s: %s", file.path, note)
        return file

    @contextlib.asynccontextmanager
    async def _endpoint(self, task: Task) -> AsyncIterator[Endpoint]:
        file = self.compose_file(task)
        main_service = file.services[file.main]
        own_image = "image" in (task.runtime_config or {})
        if not own_image and main_service.image is None and main_service.build_context is None:
            raise RuntimeLaunchError(
                f"{file.path}: service {file.main!r} has no image: give it one, or the task"
                " a runtime_config['image']"
            )
        images = {
            name: await self._builder.image(service)
            for name, service in file.services.items()
            if name != file.main or not own_image
        }
        project = _Project(self, file, images)
        try:
            await project.up(self._options.startup_timeout)
            main = ContainerRuntime(project.main_spec(images.get(file.main)))
            async with main(task) as endpoint:
                yield endpoint
        except BaseException as exc:
            try:
                await project.down()
            except Exception as failed:  # never in place of the cancellation or error
                exc.add_note(f"and removing project {project.id} failed: {failed}")
            raise
        await project.down()


@dataclass(frozen=True, kw_only=True)
class _Options:
    """What every project of one `ComposeRuntime` shares."""

    source: str | None
    command: tuple[str, ...] | None
    env_name: str | None
    capabilities: tuple[str, ...]
    resources: Mapping[str, Any]
    labels: Mapping[str, str]
    oci_runtime: str | None
    ulimits: Mapping[str, int | tuple[int, int]]
    startup_timeout: float
    stop_timeout: float


@dataclass(frozen=True, kw_only=True, slots=True)
class _MainSpec(ContainerSpec):
    """`main`'s container: `ContainerRuntime`'s, on the project's network, labelled with
    the project's id."""

    project: str = ""
    addressing: tuple[str, ...] = ()  # `--ip` and `--add-host` options

    def run_argv(
        self,
        exe: Sequence[str],
        task: Task,
        batch: str,
        name: str,
        rollout: str,
        socket_dir: str | None,
    ) -> list[str]:
        argv = ContainerSpec.run_argv(self, exe, task, batch, name, self.project, socket_dir)
        at = argv.index("--network")  # ContainerSpec's own, before any `args`
        argv[at + 1 : at + 2] = [f"proctor-{self.project}", *self.addressing]
        return argv


@dataclass
class _Project:
    """One rollout's project: its network and its services other than `main`."""

    runtime: ComposeRuntime
    file: ComposeFile
    images: Mapping[str, str]
    id: str = field(default_factory=lambda: secrets.token_hex(8))
    started: list[str] = field(default_factory=list)  # service names, in order
    network: bool = False  # whether its creation was attempted
    waiting: str = ""  # what bring-up waits for, and the last check's output
    addresses: dict[str, str] = field(default_factory=dict)  # service: IP

    @property
    def network_name(self) -> str:
        return f"proctor-{self.id}"

    def container(self, service: str) -> str:
        return f"proctor-{self.id}-{service}"

    def labels(self, service: str | None) -> list[str]:
        labels = {**self.runtime._options.labels, "proctor.batch": self.runtime.batch}
        labels |= {"proctor.rollout": self.id}
        labels |= {} if service is None else {"proctor.service": service}
        return [f"--label={k}={v}" for k, v in labels.items()]

    async def up(self, limit: float) -> None:
        """Create the network, start every service but `main` and wait for what
        `main` depends on, within `limit` seconds.

        Raises:
            RuntimeLaunchError: the engine failed, or a service did not come up.
        """
        try:
            async with asyncio.timeout(limit):
                await self._up()
        except TimeoutError:
            why = f" ({self.waiting})" if self.waiting else ""
            raise RuntimeLaunchError(f"project {self.id} not up within {limit:g}s{why}") from None

    async def _up(self) -> None:
        exe = self.runtime._exe
        self.network = True
        argv = [*exe, "network", "create", "--internal", *self.labels(None)]
        if Path(exe[0]).name == "podman":  # names go in /etc/hosts: no DNS server needed
            argv.append("--disable-dns")
        await self._engine([*argv, self.network_name], "network create")
        inspected = await self._engine([*exe, "network", "inspect", self.network_name], "inspect")
        hosts = _subnet(inspected).hosts()
        for _ in range(_FIRST_HOST - 1):
            next(hosts)
        self.addresses = {name: str(next(hosts)) for name in self.file.order}
        for name in self.file.order[:-1]:
            await self._wait_for(self.file.services[name])
            self.started.append(name)
            await self._engine(
                self._run_argv(self.file.services[name]), f"run {name}", self._env(name)
            )
        await self._wait_for(self.file.services[self.file.main])

    def main_spec(self, image: str | None) -> _MainSpec:
        """How `main` runs: `ContainerRuntime`'s container with the service's settings."""
        options, service = self.runtime._options, self.file.services[self.file.main]
        args = [f"--cap-add={c}" for c in options.capabilities] + self._settings(service)
        args += [x for v in service.volumes if v.source is None for x in ("--tmpfs", v.target)]
        command = options.command
        if options.source is None and command is None:
            command = (*(service.entrypoint or ())[1:], *(service.command or ()))
        return _MainSpec(
            image=image, source=options.source, command=command, env_name=options.env_name,
            engine=self.runtime._engine, env=service.environment,
            mounts=[f"{v.source}:{v.target}" + (":ro" if v.read_only else "")
                    for v in service.volumes if v.source is not None],
            resources=options.resources, batch=self.runtime.batch, labels={
                **options.labels, "proctor.service": service.name},
            oci_runtime=options.oci_runtime, ulimits=options.ulimits, args=args,
            startup_timeout=options.startup_timeout,
            stop_timeout=_grace(service, options.stop_timeout),
            project=self.id, addressing=tuple(self._addressing(service.name)),
        )  # fmt: skip

    async def down(self) -> None:
        """Remove the services started (in reverse) and the network.

        Raises:
            RuntimeLaunchError: the engine failed to remove one.
        """
        exe, errors = self.runtime._exe, []
        grace = self.runtime._options.stop_timeout
        services = list(reversed(self.started))
        removals = [
            _run([*exe, "rm", "-f", "-t", str(math.ceil(_grace(self.file.services[s], grace))),
                  self.container(s)])
            for s in services
        ]  # fmt: skip
        results = await asyncio.gather(*removals, return_exceptions=True)
        for service, result in zip(services, results, strict=True):
            if isinstance(result, BaseException):
                errors.append(f"rm {service}: {result!r}")
            elif result[0] != 0 and "no such container" not in result[2].lower():
                errors.append(f"rm {service}: {result[2].strip()}")
        try:  # what a creation cut short registered only after its removal
            await self._sweep()
        except RuntimeLaunchError as exc:
            errors.append(str(exc))
        if self.network:
            try:
                await _remove_network(exe, self.network_name)
            except RuntimeLaunchError as exc:
                errors.append(str(exc))
        if errors:
            raise RuntimeLaunchError(f"project {self.id}: " + "; ".join(errors))

    def _addressing(self, service: str) -> list[str]:
        """The service's own address, and every service's name in its `/etc/hosts`."""
        hosts = [f"--add-host={name}:{ip}" for name, ip in self.addresses.items()]
        return ["--ip", self.addresses[service], *hosts]

    async def _sweep(self) -> None:
        """Remove every container labelled with this project still there."""
        exe, label = self.runtime._exe, f"--filter=label=proctor.rollout={self.id}"
        left = (await self._engine([*exe, "ps", "-a", "-q", label], "ps")).split()
        if left:
            await self._engine([*exe, "rm", "-f", "-t", "0", *left], "rm")

    def _run_argv(self, service: Service) -> list[str]:
        options = self.runtime._options
        argv = [*self.runtime._exe, "run", "-d", "--name", self.container(service.name)]
        argv += ["--pull", "never", *self.labels(service.name)]
        argv += ["--network", self.network_name, *self._addressing(service.name)]
        argv += ["--cap-drop", "ALL", *(f"--cap-add={c}" for c in options.capabilities)]
        argv += ["--security-opt", "no-new-privileges"]
        argv += [f"--env={key}" for key in service.environment]
        for volume in service.volumes:
            if volume.source is None:
                argv += ["--tmpfs", volume.target]
            else:
                argv += [
                    "-v",
                    f"{volume.source}:{volume.target}" + (":ro" if volume.read_only else ""),
                ]
        argv += [
            x
            for key, flag in _LIMIT_FLAGS
            if key in options.resources
            for x in (flag, str(options.resources[key]))
        ]
        for key, value in options.ulimits.items():
            soft, hard = value if isinstance(value, tuple) else (value, value)
            argv.append(f"--ulimit={key}={soft}:{hard}")
        argv += ["--runtime", options.oci_runtime] if options.oci_runtime else []
        argv += self._settings(service)
        command = [*(service.entrypoint or ())[1:], *(service.command or ())]
        return [*argv, self.images[service.name], *command]

    def _settings(self, service: Service) -> list[str]:
        """The service's own options, shared by `main` and the others."""
        argv: list[str] = []
        if service.working_dir:
            argv += ["--workdir", service.working_dir]
        if service.user:
            argv += ["--user", service.user]
        if service.entrypoint:
            argv += ["--entrypoint", service.entrypoint[0]]
        if service.stop_signal:
            argv += ["--stop-signal", service.stop_signal]
        return argv

    def _env(self, name: str) -> dict[str, str]:
        """The engine client's environment: the service's variables (kept off argv)."""
        return {**os.environ, **self.file.services[name].environment}

    async def _engine(
        self, argv: list[str], what: str, env: Mapping[str, str] | None = None
    ) -> str:
        try:
            code, out, err = await _run(argv, env)
        except TimeoutError:
            raise RuntimeLaunchError(
                f"project {self.id}: {what} ran past {_ENV_TIMEOUT:g}s"
            ) from None
        if code != 0:
            raise RuntimeLaunchError(f"project {self.id}: {what}: {err.strip()[-2000:]}")
        return out

    async def _wait_for(self, service: Service) -> None:
        """Wait until what `service` depends on meets its condition."""
        for name, condition in service.depends_on.items():
            if condition == "service_healthy":
                await self._healthy(self.file.services[name])
            elif condition == "service_completed_successfully":
                out = await self._engine(
                    [*self.runtime._exe, "wait", self.container(name)], f"wait {name}"
                )
                if out.strip() != "0":
                    raise RuntimeLaunchError(
                        await self._why(name, f"exited with code {out.strip()}")
                    )

    async def _healthy(self, service: Service) -> None:
        """Run `service`'s healthcheck until it passes.

        Raises:
            RuntimeLaunchError: it failed `retries` times in a row after its
                `start_period`, or the service exited.
        """
        check = service.healthcheck
        assert check is not None  # the parser refuses service_healthy without one
        name, exe = self.container(service.name), self.runtime._exe
        loop = asyncio.get_running_loop()
        start, failures, output = loop.time(), 0, ""
        while True:
            try:
                code, out, err = await _run([*exe, "exec", name, *check.test], limit=check.timeout)
                output = (out + err).strip()[-500:]
            except TimeoutError:
                code, output = -1, f"the check ran past {check.timeout:g}s"
            if code == 0:
                return
            self.waiting = f"service {service.name} not healthy yet: {output}"
            _, running, _ = await _run([*exe, "inspect", "--format", "{{.State.Running}}", name])
            if running.strip() != "true":
                raise RuntimeLaunchError(
                    await self._why(service.name, "exited before it was healthy")
                )
            if loop.time() - start >= check.start_period:
                failures += 1
            if failures >= check.retries:
                raise RuntimeLaunchError(
                    await self._why(service.name, f"unhealthy after {failures} checks ({output})")
                )
            await asyncio.sleep(check.interval)

    async def _why(self, service: str, what: str) -> str:
        """`what` happened to `service`, with the last lines of its output."""
        with contextlib.suppress(Exception):
            _, out, err = await _run(
                [*self.runtime._exe, "logs", "--tail", str(_LOG_TAIL), self.container(service)]
            )
            if tail := (out + err).strip():
                return (
                    f"project {self.id}: service {service} {what}; its output ends: {tail[-1500:]}"
                )
        return f"project {self.id}: service {service} {what}"


def _subnet(inspected: str) -> ipaddress.IPv4Network | ipaddress.IPv6Network:
    """The subnet in `network inspect`'s JSON (podman's or docker's).

    Raises:
        RuntimeLaunchError: there is none.
    """
    with contextlib.suppress(ValueError, LookupError, TypeError, AttributeError):
        info = json.loads(inspected)[0]
        subnets = info.get("subnets") or info["IPAM"]["Config"]
        subnet = subnets[0].get("subnet") or subnets[0]["Subnet"]
        return ipaddress.ip_network(subnet)
    raise RuntimeLaunchError(f"network inspect: no subnet in {inspected[:200]!r}")


def _grace(service: Service, default: float) -> float:
    return default if service.stop_grace_period is None else service.stop_grace_period


async def _remove_network(exe: Sequence[str], network: str) -> None:
    code, _, err = await _run([*exe, "network", "rm", "-f", network])
    if code != 0 and "not found" not in err.lower() and "no such network" not in err.lower():
        raise RuntimeLaunchError(f"network rm {network}: {err.strip()}")


async def _run(
    argv: list[str], env: Mapping[str, str] | None = None, limit: float = _ENV_TIMEOUT
) -> tuple[int, str, str]:
    """Run an engine command to completion, as `_container._cli` does, with `env` for
    its client (a service's variables, kept off argv); `TimeoutError` after `limit` s.

    Its output goes to files, not pipes: the monitor `run -d` leaves behind can hold
    a pipe it inherited open (under uvloop), and a pipe's end would never come.
    """
    with tempfile.TemporaryFile() as out, tempfile.TemporaryFile() as err:
        proc = await asyncio.create_subprocess_exec(
            *argv,
            stdin=asyncio.subprocess.DEVNULL,
            stdout=out,
            stderr=err,
            env=None if env is None else dict(env),
        )
        try:
            async with asyncio.timeout(limit):
                code = await proc.wait()
        except BaseException:
            # SIGTERM first: a client creating a container gives up and cleans up;
            # one killed outright can leave it half-made (`down` sweeps such).
            with contextlib.suppress(ProcessLookupError):
                proc.terminate()
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(proc.wait(), _GIVE_UP)
            with contextlib.suppress(ProcessLookupError):
                proc.kill()
            await proc.wait()
            raise
        out.seek(0)
        err.seek(0)
        return code, out.read().decode(errors="replace"), err.read().decode(errors="replace")
