"""`SubstrateEntry`: how the driver starts a process inside a rollout's substrate."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

__all__ = ["SubstrateEntry"]


@dataclass(frozen=True, slots=True)
class SubstrateEntry:
    """A way into one rollout's sandbox or container, for a harness placed there.

    `command(argv)` is the host command line that runs `argv` inside the substrate
    (`podman exec -i NAME ...`, or `nsenter` into the sandbox's namespaces as its
    user), started with exactly `environ` as its environment (never the driver's whole
    one: an `nsenter` passes it on). The process sees the task's files and tools as the
    environment server does: the same filesystem, network namespace and user.

    Attributes:
        kind: "container" or "sandbox".
        prefix: the host command line that `argv` is appended to.
        python: the interpreter inside the substrate (the environment server's).
        workdir: the task's working folder inside; None for the substrate's default.
        environ: the environment of the host command.
        limits: rlimits to set on the process before it starts anything (the
            sandbox's: `memory`, `processes`, `file_size`, `cpu_time`).
        network: the substrate's network ("none": loopback only).
    """

    kind: str
    prefix: tuple[str, ...]
    python: str
    workdir: str | None = None
    environ: Mapping[str, str] = field(default_factory=dict, repr=False)
    limits: Mapping[str, Any] = field(default_factory=dict)
    network: str = "none"

    def command(self, argv: Sequence[str]) -> list[str]:
        """The host command line running `argv` inside the substrate."""
        return [*self.prefix, *argv]
