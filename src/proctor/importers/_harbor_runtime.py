"""`HarborRuntime`: each Harbor row in a container of its own task image."""

from __future__ import annotations

import asyncio
import contextlib
import secrets
import sys
from collections.abc import AsyncIterator, Mapping, Sequence
from contextlib import AbstractAsyncContextManager
from pathlib import Path
from typing import TYPE_CHECKING, Any

from .._errors import RuntimeLaunchError
from ..runtimes import ComposeRuntime, Endpoint, Runtime
from ..runtimes._container import SOCKET, ContainerRuntime, Engine, resolve_engine
from ._harbor_image import build_harbor_image

if TYPE_CHECKING:
    from ..records import Task

__all__ = ["CAPABILITIES", "HARBOR_SOURCE", "HarborRuntime"]

HARBOR_SOURCE = str(Path(__file__).with_name("_harbor_env.py"))
"""The `harbor` environment's source, served inside every task container."""
_PORT = 8000
CAPABILITIES = (
    *("CHOWN", "DAC_OVERRIDE", "FSETID", "FOWNER", "MKNOD", "NET_RAW", "SETGID"),
    *("SETUID", "SETFCAP", "SETPCAP", "NET_BIND_SERVICE", "SYS_CHROOT", "KILL", "AUDIT_WRITE"),
)
"""The capabilities a Harbor task container keeps: Docker's default set (moby's
`oci/caps/defaults.go`), which Harbor's own containers run with; `apt-get` needs
SETUID and SETGID to drop to its `_apt` user, for one."""


class HarborRuntime(Runtime):
    """Run each Harbor row (`harbor_tasks`) in a container of its task's image.

    The first rollout of a task builds its image (`environment/Dockerfile` with the
    engine's `build`, then this machine's Python and proctor layered on top; both
    cached by content hash, so later runs and batches reuse them), then every rollout
    gets a fresh container serving the `harbor` environment from that image, through
    `ContainerRuntime` (no network by default, removed at teardown), with the
    capabilities Harbor's Docker containers have (`CAPABILITIES`) and no others. A
    row's `runtime_config["resources"]` (from `task.toml`'s `cpus` and `memory_mb`)
    limits its container. A task whose `environment/` ships a Compose file
    (`docker-compose.yaml`, ...) runs in a project of its own through `ComposeRuntime`
    instead: its `main` service in the task image, the other services as the file
    says, all on an internal network (docs/compose.md).

    Args:
        engine: "podman" or "docker"; default: podman if installed, else docker.
        network: the containers' network: "none" (default), or a network name such as
            "bridge".
        internet: the network for rows whose `task.toml` allows the internet
            (`allow_internet`, true unless set false, as in Harbor), such as "bridge";
            None (default): `network` for every row.
        oci_runtime: the engine's OCI runtime (`--runtime`), for builds and containers.
        batch: the `proctor.batch` label of the containers (default: a fresh id).
        mounts: bind mounts for every container, `HOST:CONTAINER[:ro|rw]`.
        startup_timeout: seconds a container may take to serve.
        stop_timeout: seconds between SIGTERM and SIGKILL at teardown.

    Making one needs no engine: a missing one fails each rollout in provisioning.
    """

    def __init__(
        self,
        *,
        engine: Engine | None = None,
        network: str = "none",
        internet: str | None = None,
        oci_runtime: str | None = None,
        batch: str | None = None,
        mounts: Sequence[str] = (),
        startup_timeout: float = 60.0,
        stop_timeout: float = 5.0,
    ) -> None:
        self.network = network
        self.internet = internet
        self.oci_runtime = oci_runtime
        self._options: dict[str, Any] = {
            "engine": engine,
            "port": _PORT,
            "oci_runtime": oci_runtime,
            "batch": batch or secrets.token_hex(6),
            "mounts": mounts,
            "args": [f"--cap-add={name}" for name in CAPABILITIES],  # after --cap-drop ALL
            "startup_timeout": startup_timeout,
            "stop_timeout": stop_timeout,
        }
        self._runtimes: dict[str, ContainerRuntime] = {}
        self._compose: ComposeRuntime | None = None
        self._images: dict[tuple[str, str | None], str] = {}
        self._locks: dict[tuple[str, str | None], asyncio.Lock] = {}

    @property
    def containers(self) -> ContainerRuntime:
        """The `ContainerRuntime` of `network` (made on first use; `reconcile()` on it
        removes every container of the batch).

        Raises:
            RuntimeLaunchError: no such engine is installed.
        """
        return self._containers(self.network)

    def network_of(self, task: Task) -> str:
        """The network `task`'s container joins."""
        allowed = _harbor_config(task).get("allow_internet", True)
        return self.internet if self.internet is not None and allowed else self.network

    def _containers(self, network: str) -> ContainerRuntime:
        if network not in self._runtimes:
            self._runtimes[network] = ContainerRuntime(
                command=_command(network), network=network, **self._options
            )
        return self._runtimes[network]

    def __repr__(self) -> str:
        return f"HarborRuntime(batch={self._options['batch']!r})"

    def __call__(self, task: Task) -> AbstractAsyncContextManager[Endpoint]:
        return self._endpoint(task)

    async def __aenter__(self) -> HarborRuntime:
        return self

    async def __aexit__(self, *exc: object) -> None:
        if self._compose is not None:  # its containers and networks: one batch label
            await self._compose.reconcile()
            return
        for runtime in list(self._runtimes.values())[:1]:  # one batch label for all
            await runtime.reconcile()

    async def image(self, task: Task) -> str:
        """The image `task` runs in, built on first use.

        Raises:
            RuntimeLaunchError: the row names no Harbor environment, or the build failed.
        """
        harbor = _harbor_config(task)
        key = (str(harbor.get("environment", "")), harbor.get("docker_image"))
        async with self._locks.setdefault(key, asyncio.Lock()):
            if key not in self._images:
                self._images[key] = await build_harbor_image(
                    resolve_engine(self._options["engine"]),
                    key[0],
                    docker_image=key[1],
                    oci_runtime=self.oci_runtime,
                    build_timeout=float(harbor.get("build_timeout_sec", 600.0)),
                )
        return self._images[key]

    @contextlib.asynccontextmanager
    async def _endpoint(self, task: Task) -> AsyncIterator[Endpoint]:
        config = {**(task.runtime_config or {}), "image": await self.image(task)}
        compose = _harbor_config(task).get("compose")
        if compose:
            runtime: Runtime = self._projects()
            config["compose"] = compose
        else:
            runtime = self._containers(self.network_of(task))
        async with runtime(task.model_copy(update={"runtime_config": config})) as end:
            yield end

    def _projects(self) -> ComposeRuntime:
        """The `ComposeRuntime` of rows with a Compose file (their projects' networks
        are internal: `internet` does not apply)."""
        if self._compose is None:
            options = self._options
            self._compose = ComposeRuntime(
                command=_command("none"), engine=options["engine"],
                capabilities=CAPABILITIES, batch=options["batch"],
                oci_runtime=self.oci_runtime, startup_timeout=options["startup_timeout"],
                stop_timeout=options["stop_timeout"],
            )  # fmt: skip
        return self._compose


def _harbor_config(task: Task) -> Mapping[str, Any]:
    harbor = (task.runtime_config or {}).get("harbor")
    if not isinstance(harbor, Mapping) or not (
        harbor.get("environment") or harbor.get("docker_image")
    ):
        raise RuntimeLaunchError(
            f"{task.slug}: not a Harbor row (runtime_config.harbor names no environment)"
        )
    return harbor


def _command(network: str) -> list[str]:
    """`python -m proctor.serve` on the harbor source, by this interpreter's own path."""
    argv = [sys.executable, "-m", "proctor.serve", HARBOR_SOURCE]
    if network == "none":
        return [*argv, "--unix", SOCKET]
    return [*argv, "--host", "0.0.0.0", "--port", str(_PORT), "--token-env", "PROCTOR_TOKEN"]
