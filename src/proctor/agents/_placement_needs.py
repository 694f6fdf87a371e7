"""`Needs`: what a harness declares it needs of the rollouts it is placed in."""

from __future__ import annotations

from dataclasses import dataclass

__all__ = ["APIS", "Needs"]

APIS = ("openai-chat", "openai-responses", "anthropic-messages")
"""The model API families a harness may declare (the interception proxy serves each)."""


@dataclass(frozen=True, slots=True)
class Needs:
    """What a harness needs, checked by the batch plan before anything launches.

    Attributes:
        capabilities: names of the environment's capabilities it uses (`shell`, ...).
        api: the model API family it speaks (one of `APIS`), or None for any.
        image: the container image it is installed in (`placement="substrate"` under a
            container runtime: every task must run in it), or None.
        network: it needs a network beyond loopback in its substrate (a container on a
            named network, a sandbox with `network="host"`).
    """

    capabilities: tuple[str, ...] = ()
    api: str | None = None
    image: str | None = None
    network: bool = False

    def __post_init__(self) -> None:
        object.__setattr__(self, "capabilities", tuple(self.capabilities))
        if self.api is not None and self.api not in APIS:
            raise ValueError(f"needs.api must be one of {', '.join(APIS)}, not {self.api!r}")
