"""The runtime section of a batch config: one model per runtime kind (`RuntimeConfig`),
and `isolated_runtime`, the default."""

from __future__ import annotations

import re
import shutil
from typing import Annotated, Any, Literal, TypeAlias

from pydantic import BaseModel, BeforeValidator, ConfigDict, Field, field_validator

__all__ = [
    "LEASE",
    "ComposeRuntimeConfig",
    "ContainerRuntimeConfig",
    "LocalRuntimeConfig",
    "RayRuntimeConfig",
    "RuntimeConfig",
    "SandboxRuntimeConfig",
    "Seconds",
    "SubprocessRuntimeConfig",
    "UrlRuntimeConfig",
    "isolated_runtime",
]

# Variable names the harness's environment never carries from the parent (the same
# rule `CommandAgent` applies): a config that sets one would put a secret in a file.
_SECRET_NAME = re.compile(r"KEY|TOKEN|SECRET|PASSW|CRED|AUTH", re.I)

Seconds = Annotated[float, Field(ge=0, allow_inf_nan=False)]

LEASE = 30.0
"""The default `lease` of subprocess and sandbox batches: seconds their servers outlive
a runner that died."""


def _lease_seconds(value: Any) -> Any:
    if isinstance(value, bool):  # `true` would be a 1 s grace, `false` a 0.0 float
        raise ValueError("lease takes seconds (0 turns it off), not true or false")
    return value


Lease = Annotated[Seconds | None, BeforeValidator(_lease_seconds)]
"""Seconds, 0 for no lease; None (a batch recorded before the lease was the default)
also means none."""


class _Model(BaseModel):
    model_config = ConfigDict(extra="forbid")


def _no_secret_names(env: dict[str, str]) -> dict[str, str]:
    secret = sorted(name for name in env if _SECRET_NAME.search(name))
    if secret:
        raise ValueError(
            f"{', '.join(secret)}: secrets never go in a config file; "
            "the harness gets model credentials from the interception proxy"
        )
    return env


class _Launch(_Model):
    startup_timeout: Annotated[float, Field(gt=0, allow_inf_nan=False)] = 60.0
    stop_timeout: Seconds = 5.0


class LocalRuntimeConfig(_Model):
    """Serve in the runner's process (`LocalRuntime`): task code shares the runner's
    memory and environment, provider keys included, so it is for trusted code only."""

    kind: Literal["local"]
    trusted: bool = False
    """Say the task code is trusted: without it the plan refuses a local runtime while
    a provider key is in the runner's environment."""


class SubprocessRuntimeConfig(_Launch):
    """A child process per rollout (`SubprocessRuntime`), optionally from warm zygotes."""

    kind: Literal["subprocess"]
    warm: bool | Annotated[int, Field(ge=0)] = False
    """Fork each rollout from this many zygotes (`true` is 1)."""
    python: str | None = None
    env: dict[str, str] = Field(default_factory=dict)
    command: list[str] | None = None
    """A full command instead of `python -m proctor.serve SOURCE` (not with `warm`)."""
    cwd: str | None = None
    lease: Lease = LEASE
    """Keep the servers alive under a lease supervisor, for this many seconds after the
    runner dies, so `--resume` continues their in-flight rollouts (`batch._lease`);
    0 turns it off."""

    _env = field_validator("env")(_no_secret_names)


class SandboxRuntimeConfig(_Launch):
    """A bubblewrap sandbox per rollout (`SandboxRuntime`)."""

    kind: Literal["sandbox"]
    network: Literal["none", "host"] = "none"
    warm: bool = False
    python: str | None = None
    env: dict[str, str] = Field(default_factory=dict)
    binds: list[str] = Field(default_factory=list)
    writable: list[str] = Field(default_factory=list)
    bwrap: str = "bwrap"
    """The bubblewrap executable."""
    lease: Lease = LEASE
    """As `SubprocessRuntimeConfig.lease` (unused with a harness placed in the substrate)."""
    limits: dict[str, Any] = Field(default_factory=dict)
    """Over `SandboxRuntime`'s defaults: `memory`, `processes`, `file_size`, `tmpfs`,
    `cpu_time`, `wall_time` (None lifts one); a task's `runtime_config` overrides."""

    _env = field_validator("env")(_no_secret_names)

    @field_validator("limits")
    @classmethod
    def _limits(cls, limits: dict[str, Any]) -> dict[str, Any]:
        from ..runtimes._sandbox_limits import _Limits

        _Limits.parse(limits, "limits")  # the runtime's own rules, so they never drift
        return limits


class ContainerRuntimeConfig(_Launch):
    """A container per rollout (`ContainerRuntime`), never pulled."""

    kind: Literal["container"]
    image: str | None = None
    """Default: each task's `runtime_config["image"]`."""
    source: str | None = None
    """Environment source path inside the image."""
    command: list[str] | None = None
    env_name: str | None = None
    engine: Literal["podman", "docker"] | None = None
    network: str = "none"
    port: Annotated[int, Field(ge=1, le=65535)] = 8000
    env: dict[str, str] = Field(default_factory=dict)
    mounts: list[str] = Field(default_factory=list)
    resources: dict[str, Any] = Field(default_factory=dict)
    """`{"cpus": 1.5, "memory": "512m", "pids": 256}`; a task's own override these."""
    labels: dict[str, str] = Field(default_factory=dict)
    oci_runtime: str | None = None
    ulimits: dict[str, int | tuple[int, int]] | None = None
    """Per-container limits; default: `ContainerRuntime`'s."""
    args: list[str] = Field(default_factory=list)

    _env = field_validator("env")(_no_secret_names)


class ComposeRuntimeConfig(_Launch):
    """A Compose project per rollout (`ComposeRuntime`), never pulled."""

    kind: Literal["compose"]
    file: str | None = None
    """The Compose file; default: each task's `runtime_config["compose"]`."""
    source: str | None = None
    """Environment source path inside the `main` service's image."""
    command: list[str] | None = None
    env_name: str | None = None
    main: str = "main"
    """The service that serves the environment."""
    engine: Literal["podman", "docker"] | None = None
    variables: dict[str, str] = Field(default_factory=dict)
    """Values for `${NAME}` in the Compose file."""
    capabilities: list[str] = Field(default_factory=list)
    resources: dict[str, Any] = Field(default_factory=dict)
    labels: dict[str, str] = Field(default_factory=dict)
    oci_runtime: str | None = None
    build_timeout: Annotated[float, Field(gt=0, allow_inf_nan=False)] = 600.0

    _variables = field_validator("variables")(_no_secret_names)


class RayRuntimeConfig(_Launch):
    """Each rollout's environment as a Ray actor (`RayRuntime`)."""

    kind: Literal["ray"]
    address: str | None = None
    """`ray.init(address=...)`; None: `RAY_ADDRESS` or Ray's own lookup."""
    resources: dict[str, Any] = Field(default_factory=dict)
    lease: Lease = LEASE
    """As `SubprocessRuntimeConfig.lease`: the actors belong to the lease supervisor (a
    Ray driver of its own), so they die with it, at the latest when the lease lapses."""


class UrlRuntimeConfig(_Model):
    """An environment already served elsewhere (`UrlRuntime(url)`)."""

    kind: Literal["url"]
    url: str
    """`tcp://host:port` or `unix:///path`."""
    token_env: str | None = None
    """The variable holding the server's shared token (the name, never the token)."""

    @field_validator("url")
    @classmethod
    def _url(cls, url: str) -> str:
        if not url.startswith(("tcp://", "unix://")):
            raise ValueError(f"expected tcp://HOST:PORT or unix:///PATH, got {url!r}")
        return url


RuntimeConfig: TypeAlias = Annotated[
    LocalRuntimeConfig
    | SubprocessRuntimeConfig
    | SandboxRuntimeConfig
    | ContainerRuntimeConfig
    | ComposeRuntimeConfig
    | RayRuntimeConfig
    | UrlRuntimeConfig,
    Field(discriminator="kind"),
]


def isolated_runtime() -> SandboxRuntimeConfig | SubprocessRuntimeConfig:
    """The default runtime: a bubblewrap sandbox where `bwrap` is on PATH, else a child
    process with an allowlisted environment; never the runner's own process."""
    if shutil.which("bwrap") is not None:
        return SandboxRuntimeConfig(kind="sandbox")
    return SubprocessRuntimeConfig(kind="subprocess")
