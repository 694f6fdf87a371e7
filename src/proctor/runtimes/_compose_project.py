"""One rollout's Compose project: its network, its services other than `main`, and how
`main` runs (`ContainerRuntime`'s container on the project's network)."""

from __future__ import annotations

import asyncio
import contextlib
import ipaddress
import json
import math
import os
import secrets
import shutil
import tempfile
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from .._errors import RuntimeLaunchError
from .._tempdirs import owned_tempdir
from ._compose_file import ComposeFile, Service
from ._container import labelled
from ._container_spec import WALLS, ContainerSpec, Engine, limit_options

__all__ = ["MainSpec", "Options", "Project", "remove_network", "run"]

_LOG_TAIL = 20  # lines of a failed service's output quoted in the error
_ENV_TIMEOUT = 60.0  # seconds an engine command (network, rm, exec, ...) may take
_FIRST_HOST = 10  # services get the subnet's addresses from its 10th host on
_GIVE_UP = 1.0  # seconds an engine client cut short gets to give up on SIGTERM


@dataclass(frozen=True, kw_only=True)
class Options:
    """What every project of one `ComposeRuntime` shares."""

    exe: tuple[str, ...]  # the engine CLI
    engine: Engine | None
    batch: str  # the `proctor.batch` label
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
class MainSpec(ContainerSpec):
    """`main`'s container: `ContainerRuntime`'s, on the project's network, named and
    labelled with the project's id (so is its folder: an adopted rollout's socket names
    its project)."""

    project: str = ""
    addressing: tuple[str, ...] = ()  # `--ip` and `--add-host` options

    def _rollout_id(self) -> str:
        return self.project

    def _network_options(self) -> list[str]:
        return ["--network", f"proctor-{self.project}", *self.addressing]


@dataclass
class Project:
    """One rollout's project: its network and its services other than `main`."""

    options: Options
    file: ComposeFile
    images: Mapping[str, str]
    id: str = field(default_factory=lambda: secrets.token_hex(8))
    started: list[str] = field(default_factory=list)  # service names, in order
    network: bool = False  # whether its creation was attempted
    waiting: str = ""  # what bring-up waits for, and the last check's output
    addresses: dict[str, str] = field(default_factory=dict)  # service: IP
    folder: str | None = None  # the engine clients' working folder, once made

    @property
    def network_name(self) -> str:
        return f"proctor-{self.id}"

    def container(self, service: str) -> str:
        return f"proctor-{self.id}-{service}"

    def labels(self, service: str | None) -> list[str]:
        labels = {**self.options.labels, "proctor.batch": self.options.batch}
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
        exe = self.options.exe
        # The engine clients' working folder: a service's monitor (conmon) writes an
        # `oom` file there when the service is OOM-killed (it was the driver's folder).
        self.folder = owned_tempdir("compose")
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

    def main_spec(self, image: str | None) -> MainSpec:
        """How `main` runs: `ContainerRuntime`'s container with the service's settings."""
        options, service = self.options, self.file.services[self.file.main]
        args = [f"--cap-add={c}" for c in options.capabilities] + self._settings(service)
        args += [x for v in service.volumes if v.source is None for x in ("--tmpfs", v.target)]
        command = options.command
        if options.source is None and command is None:
            command = (*(service.entrypoint or ())[1:], *(service.command or ()))
        return MainSpec(
            image=image, source=options.source, command=command, env_name=options.env_name,
            engine=options.engine, env=service.environment,
            mounts=[f"{v.source}:{v.target}" + (":ro" if v.read_only else "")
                    for v in service.volumes if v.source is not None],
            resources=options.resources, batch=options.batch, labels={
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
        exe, errors = self.options.exe, []
        grace = self.options.stop_timeout
        services = list(reversed(self.started))
        removals = [
            run([*exe, "rm", "-f", "-t", str(math.ceil(_grace(self.file.services[s], grace))),
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
                await remove_network(exe, self.network_name)
            except RuntimeLaunchError as exc:
                errors.append(str(exc))
        if self.folder is not None:
            shutil.rmtree(self.folder, ignore_errors=True)
        if errors:
            raise RuntimeLaunchError(f"project {self.id}: " + "; ".join(errors))

    def _addressing(self, service: str) -> list[str]:
        """The service's own address, and every service's name in its `/etc/hosts`."""
        hosts = [f"--add-host={name}:{ip}" for name, ip in self.addresses.items()]
        return ["--ip", self.addresses[service], *hosts]

    async def _sweep(self) -> None:
        """Remove every container labelled with this project still there."""
        left = await labelled(self.options.exe, ("ps", "-a"), {"proctor.rollout": self.id})
        if left:
            await self._engine([*self.options.exe, "rm", "-f", "-t", "0", *left], "rm")

    def _run_argv(self, service: Service) -> list[str]:
        options = self.options
        argv = [*options.exe, "run", "-d", "--name", self.container(service.name)]
        argv += ["--pull", "never", *self.labels(service.name)]
        argv += ["--network", self.network_name, *self._addressing(service.name)]
        argv += [*WALLS, *(f"--cap-add={c}" for c in options.capabilities)]
        argv += [f"--env={key}" for key in service.environment]
        for volume in service.volumes:
            if volume.source is None:
                argv += ["--tmpfs", volume.target]
            else:
                argv += [
                    "-v",
                    f"{volume.source}:{volume.target}" + (":ro" if volume.read_only else ""),
                ]
        argv += limit_options(options.resources, options.ulimits, options.oci_runtime)
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
            code, out, err = await run(argv, env, cwd=self.folder)
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
                    [*self.options.exe, "wait", self.container(name)], f"wait {name}"
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
        name, exe = self.container(service.name), self.options.exe
        loop = asyncio.get_running_loop()
        start, failures, output = loop.time(), 0, ""
        while True:
            try:
                code, out, err = await run([*exe, "exec", name, *check.test], limit=check.timeout)
                output = (out + err).strip()[-500:]
            except TimeoutError:
                code, output = -1, f"the check ran past {check.timeout:g}s"
            if code == 0:
                return
            self.waiting = f"service {service.name} not healthy yet: {output}"
            _, running, _ = await run([*exe, "inspect", "--format", "{{.State.Running}}", name])
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
            _, out, err = await run(
                [*self.options.exe, "logs", "--tail", str(_LOG_TAIL), self.container(service)]
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


async def remove_network(exe: Sequence[str], network: str) -> None:
    """Remove `network` (gone already is fine).

    Raises:
        RuntimeLaunchError: the engine failed.
    """
    code, _, err = await run([*exe, "network", "rm", "-f", network])
    if code != 0 and "not found" not in err.lower() and "no such network" not in err.lower():
        raise RuntimeLaunchError(f"network rm {network}: {err.strip()}")


async def run(
    argv: list[str],
    env: Mapping[str, str] | None = None,
    limit: float | None = _ENV_TIMEOUT,
    cwd: str | None = None,
) -> tuple[int, str, str]:
    """Run an engine command to completion, as `_container._cli` does, with `env` for
    its client (a service's variables, kept off argv), in folder `cwd`; `TimeoutError`
    after `limit` s (None: no limit).

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
            cwd=cwd,
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
