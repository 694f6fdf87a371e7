"""`ContainerSpec`: how `ContainerRuntime` runs each rollout's container, checked once."""

from __future__ import annotations

import os
import re
import secrets
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Literal

if TYPE_CHECKING:
    from ..records import Task

__all__ = [
    "DEFAULT_ULIMITS",
    "SOCKET",
    "SOCKET_DIR",
    "WALLS",
    "ContainerSpec",
    "Engine",
    "limit_options",
]

Engine = Literal["podman", "docker"]

SOCKET_DIR = "/run/proctor"
"""Where a container on `network="none"` finds the folder its Unix socket goes in."""
SOCKET = f"{SOCKET_DIR}/env.sock"
DEFAULT_ULIMITS: Mapping[str, int | tuple[int, int]] = {"nofile": 1024, "nproc": 4096}
NAME = re.compile(r"^[a-zA-Z0-9][a-zA-Z0-9_.-]*$")  # a network or batch name
_MEMORY = re.compile(r"^[0-9]+[bkmg]?$", re.IGNORECASE)
_LIMIT_FLAGS = (("cpus", "--cpus"), ("memory", "--memory"), ("pids", "--pids-limit"))
WALLS = ("--cap-drop", "ALL", "--security-opt", "no-new-privileges")
"""`run` options every container of proctor's gets: no capability, no privilege gained."""


@dataclass(frozen=True, kw_only=True, slots=True)
class ContainerSpec:
    """How `ContainerRuntime` runs each rollout's container; checked when made.

    `ContainerRuntime(image, source, **fields)` makes one from its arguments, and
    `ContainerRuntime(spec)` takes one whole (`dataclasses.replace` derives another).

    Args:
        image: image to run (default: the task's `runtime_config["image"]`).
        source: environment source path inside the image, for `proctor.serve`.
        command: a full command instead of `python -m proctor.serve SOURCE`.
        env_name: which environment to serve when the source defines several.
        engine: "podman" or "docker"; default: podman if installed, else docker.
        network: "none", or the network to publish `port` from.
        port: the container port the server listens on, off "none".
        env: environment variables for the container (kept off command lines).
        mounts: bind mounts, `HOST:CONTAINER[:ro|rw]` (the host path made absolute).
        resources: default limits, `{"cpus": 1.5, "memory": "512m", "pids": 256}`;
            a task's `runtime_config["resources"]` overrides them key by key.
        batch: the `proctor.batch` label (default: a fresh id per runtime).
        labels: more labels for every container.
        oci_runtime: OCI runtime for the engine (`--runtime`, e.g. /usr/sbin/runc).
        ulimits: per-container limits (soft, or (soft, hard)); the engines' own
            defaults can exceed what the host allows. `nproc` counts every process of
            the container's user on the host (root's, for a rootful engine).
        args: more options for `run`, before the image.
        startup_timeout: seconds to wait for the server's announcement.
        stop_timeout: seconds between SIGTERM and SIGKILL at teardown.

    Raises:
        ValueError: a field is malformed (the message names it).
    """

    image: str | None = None
    source: str | None = None
    command: Sequence[str] | None = None
    env_name: str | None = None
    engine: Engine | None = None
    network: str = "none"
    port: int = 8000
    env: Mapping[str, str] = field(default_factory=dict)
    mounts: Sequence[str] = ()
    resources: Mapping[str, Any] = field(default_factory=dict)
    batch: str | None = None
    labels: Mapping[str, str] = field(default_factory=dict)
    oci_runtime: str | None = None
    ulimits: Mapping[str, int | tuple[int, int]] = field(default_factory=lambda: DEFAULT_ULIMITS)
    args: Sequence[str] = ()
    startup_timeout: float = 60.0
    stop_timeout: float = 5.0

    def __post_init__(self) -> None:
        if self.source is not None and self.command is not None:
            raise ValueError("ContainerRuntime takes a source or a command, not both")
        if self.engine not in (None, "podman", "docker"):
            raise ValueError(f"engine must be 'podman', 'docker' or None, not {self.engine!r}")
        if self.network == "host" or not NAME.match(self.network):
            raise ValueError(f"network must be 'none' or a network name, not {self.network!r}")
        if not 0 < self.port < 65536:
            raise ValueError(f"port must be 1-65535, not {self.port}")
        if self.batch is not None and not NAME.match(self.batch):
            raise ValueError(f"batch must be letters, digits, '_', '.', '-': {self.batch!r}")
        fixed = {
            "command": None if self.command is None else tuple(self.command),
            "env": dict(self.env),
            "mounts": tuple(_mount(m) for m in self.mounts),
            "resources": _resources(self.resources),
            "labels": dict(self.labels),
            "ulimits": dict(self.ulimits),
            "args": tuple(self.args),
        }
        for name, value in fixed.items():
            object.__setattr__(self, name, value)  # frozen: normalized once, here

    def run_argv(
        self,
        exe: Sequence[str],
        task: Task,
        batch: str,
        name: str,
        rollout: str,
        socket_dir: str | None,
    ) -> list[str]:
        """The engine's `run` command line for one rollout's container (`socket_dir`:
        the folder of its Unix socket on this machine, on network "none")."""
        config = task.runtime_config or {}
        image = config.get("image", self.image)
        if not isinstance(image, str) or not image:
            raise ValueError(f"no image for task {task.slug!r}: pass image= or runtime_config")
        if self.command is None and self.source is None:
            raise ValueError("ContainerRuntime needs a source or a command")
        argv = [*exe, "run", "--name", name, "--pull", "never", "--log-driver", "none"]
        labels = {**self.labels, "proctor.batch": batch, "proctor.rollout": rollout}
        argv += [f"--label={k}={v}" for k, v in labels.items()]
        argv += [*self._network_options(), *WALLS]
        if socket_dir is not None:
            argv += ["-v", f"{socket_dir}:{SOCKET_DIR}", "--env=PROCTOR_SOCKET"]
        else:
            argv += ["-p", f"127.0.0.1::{self.port}", "--env=PROCTOR_TOKEN"]
        argv += [f"--env={key}" for key in ["PYTHONUNBUFFERED", *self.env]]
        for mount in self.mounts:
            argv += ["-v", mount]
        limits = {**self.resources, **_resources(config.get("resources") or {})}
        argv += limit_options(limits, self.ulimits, self.oci_runtime)
        return [*argv, *self.args, image, *self._serve_command(socket_dir is not None)]

    def _rollout_id(self) -> str:
        """The id of a new rollout's container (`proctor-<id>`, its `proctor.rollout`
        label and its folder on this machine): a fresh one."""
        return secrets.token_hex(8)

    def _network_options(self) -> list[str]:
        """The `run` options that put the container on its network."""
        return ["--network", self.network]

    def _serve_command(self, unix: bool) -> list[str]:
        if self.command is not None:
            return list(self.command)
        assert self.source is not None
        argv = ["python", "-m", "proctor.serve", self.source]
        argv += ["--env", self.env_name] if self.env_name else []
        if unix:
            return [*argv, "--unix", SOCKET]
        tcp = f"--host 0.0.0.0 --port {self.port} --token-env PROCTOR_TOKEN"
        return [*argv, *tcp.split()]


def limit_options(
    limits: Mapping[str, Any],
    ulimits: Mapping[str, int | tuple[int, int]],
    oci_runtime: str | None,
) -> list[str]:
    """The `run` options of a container's checked `limits` (`_resources`), `ulimits`
    (soft, or (soft, hard)) and OCI runtime."""
    argv = [x for key, flag in _LIMIT_FLAGS if key in limits for x in (flag, str(limits[key]))]
    for key, value in ulimits.items():
        soft, hard = value if isinstance(value, tuple) else (value, value)
        argv.append(f"--ulimit={key}={soft}:{hard}")
    return [*argv, "--runtime", oci_runtime] if oci_runtime else argv


def _mount(spec: str) -> str:
    """Check a `HOST:CONTAINER[:ro|rw]` bind mount; the host path made absolute."""
    parts = spec.split(":")
    if len(parts) not in (2, 3) or (len(parts) == 3 and parts[2] not in ("ro", "rw")):
        raise ValueError(f"a mount is HOST:CONTAINER[:ro|rw], not {spec!r}")
    host, inside = os.path.abspath(parts[0]), parts[1]
    if not os.path.exists(host):
        raise ValueError(f"mount {spec!r}: {host} does not exist")
    if not inside.startswith("/"):
        raise ValueError(f"mount {spec!r}: the container path must be absolute")
    return ":".join([host, *parts[1:]])


def _resources(resources: Mapping[str, Any]) -> dict[str, Any]:
    """The limits a container applies (`cpus`, `memory`, `pids`), checked; others ignored."""
    out: dict[str, Any] = {}
    cpus = resources.get("cpus")
    if cpus is not None:
        if isinstance(cpus, bool) or not isinstance(cpus, int | float) or cpus <= 0:
            raise ValueError(f"resources.cpus must be a positive number, not {cpus!r}")
        out["cpus"] = cpus
    memory = resources.get("memory")
    if memory is not None:
        if isinstance(memory, bool) or not _MEMORY.match(str(memory)):
            raise ValueError(f"resources.memory must be bytes or like '512m', not {memory!r}")
        out["memory"] = memory
    pids = resources.get("pids")
    if pids is not None:
        if isinstance(pids, bool) or not isinstance(pids, int) or pids <= 0:
            raise ValueError(f"resources.pids must be a positive integer, not {pids!r}")
        out["pids"] = pids
    return out
