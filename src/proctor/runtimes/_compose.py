"""`ComposeRuntime`: each rollout's environment in a Compose project of its own."""

from __future__ import annotations

import contextlib
import dataclasses
import logging
import os
import secrets
from collections.abc import AsyncIterator, Mapping, Sequence
from contextlib import AbstractAsyncContextManager
from typing import TYPE_CHECKING, Any

from .._errors import RuntimeLaunchError
from .._resource import AsyncResource
from ._base import Endpoint, Runtime
from ._compose_build import ImageBuilder
from ._compose_file import ComposeFile, load_compose
from ._compose_project import Options, Project, remove_network
from ._compose_watch import watched
from ._container import ContainerRuntime, labelled, resolve_engine, rollout_of, undo
from ._container_spec import DEFAULT_ULIMITS, NAME, Engine, _resources

if TYPE_CHECKING:
    from ..records import Task

__all__ = ["ComposeRuntime"]

log = logging.getLogger("proctor.runtimes.compose")


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
    folder of this machine, which is the control channel. While the rollout runs, the
    death of any service (killed, OOM-killed, or exited with an error code; an exit
    with code 0 is a job done) resolves `Endpoint.died` naming it. At teardown `main`
    stops first (its shutdown hooks run), then the other services, then the network; a
    bring-up that fails or is cancelled half-way removes what it started. A project
    outlives a runner killed with SIGKILL: a resumed batch adopts its rollout and
    `release`s the whole project when that ends.

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
        self._exe = resolve_engine(engine)
        self._options = Options(
            exe=tuple(self._exe), engine=engine, batch=self.batch,
            source=source, command=None if command is None else tuple(command),
            env_name=env_name, capabilities=tuple(capabilities),
            resources=_resources(resources or {}), labels=dict(labels or {}),
            oci_runtime=oci_runtime, ulimits=dict(ulimits), startup_timeout=startup_timeout,
            stop_timeout=stop_timeout,
        )  # fmt: skip
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
        networks = await labelled(self._exe, ("network", "ls"), labels)
        for network in networks:
            await remove_network(self._exe, network)
        return removed + networks

    async def release(self, url: str) -> None:
        """Remove the project whose `main` serves `url`: a rollout a resumed runner
        adopted after the runner that brought the project up died. `main` gets
        `stop_timeout` to run its shutdown hooks; then every other container of the
        project, its network and `main`'s socket folder go.

        Raises:
            ValueError: `url` is not the socket of a project of this batch.
            RuntimeLaunchError: the engine failed.
        """
        project = rollout_of(url, self.batch)  # `main`'s id is its project's
        main = ContainerRuntime(
            batch=self.batch, engine=self._engine, stop_timeout=self._options.stop_timeout
        )
        try:
            await main.release(url)
        finally:
            await self.reconcile({"proctor.rollout": project})

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
        project = Project(self._options, file, images)
        try:
            await project.up(self._options.startup_timeout)
            main = ContainerRuntime(project.main_spec(images.get(file.main)))
            async with main(task) as endpoint, watched(project, endpoint.died) as died:
                entry = endpoint.entry and dataclasses.replace(
                    endpoint.entry, network=project.network_name
                )
                yield dataclasses.replace(endpoint, died=died, entry=entry)
        except BaseException as exc:
            await undo(exc, project.down, f"removing project {project.id}")
            raise
        await project.down()
