"""Values a template author touches: capabilities, evaluation results, typed answers."""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any, Generic, TypeVar

__all__ = ["Answer", "Capability", "EvaluationResult", "SubScore"]

T = TypeVar("T")


@dataclass(frozen=True, slots=True)
class Capability:
    """A live endpoint the agent may use, published in `hello` bindings.

    `url` is where the server itself dials it; clients never use it directly but reach
    it only through `tunnel.open` on an authenticated control connection
    (`client.binding(name)` gives a local URL of the same form). Proctor's own
    capabilities listen on Unix sockets in private (0700) directories; a daemon of your
    own should too, or require a secret of its own: a loopback TCP port is open to every
    local user.

    Args:
        name: key the agent asks for (`client.binding(name)`), unique per environment.
        protocol: what speaks there (`shell`, `mcp`, `cdp`, `http`, ...).
        url: where it listens inside the substrate: `unix:///abs/path` (a byte stream),
            `http+unix://<percent-encoded socket path>/path` (HTTP on a Unix socket), or
            TCP-style, e.g. `tcp://127.0.0.1:2222`, `ssh://user@127.0.0.1:22`.
        params: anything else a client needs (credentials never belong here).
    """

    name: str
    protocol: str
    url: str
    params: dict[str, Any] = field(default_factory=dict)

    def to_manifest(self) -> dict[str, Any]:
        """The binding as it travels in `hello`."""
        return {
            "name": self.name,
            "protocol": self.protocol,
            "url": self.url,
            "params": self.params,
        }

    @classmethod
    def from_manifest(cls, data: dict[str, Any]) -> Capability:
        """Parse one binding from a `hello` result."""
        return cls(
            str(data["name"]),
            str(data.get("protocol", "")),
            str(data["url"]),
            dict(data.get("params") or {}),
        )


@dataclass(frozen=True, slots=True)
class SubScore:
    """One named component of a grade."""

    name: str
    value: float
    weight: float = 1.0


@dataclass(slots=True)
class EvaluationResult:
    """A rich second yield: a reward plus how it was reached.

    When `reward` is omitted it is the weighted mean of `subscores`.
    """

    reward: float = math.nan
    subscores: list[SubScore] = field(default_factory=list)
    info: dict[str, Any] = field(default_factory=dict)
    content: str | None = None
    is_error: bool = False
    done: bool | None = None

    def __post_init__(self) -> None:
        self.subscores = [s if isinstance(s, SubScore) else SubScore(**s) for s in self.subscores]
        if math.isnan(self.reward) and self.subscores:
            total = sum(s.weight for s in self.subscores)
            if total:
                self.reward = sum(s.value * s.weight for s in self.subscores) / total

    def to_wire(self) -> dict[str, Any]:
        """The `tasks.grade` result for this evaluation."""
        out: dict[str, Any] = {"score": self.reward}
        if self.subscores:
            out["subscores"] = [
                {"name": s.name, "value": s.value, "weight": s.weight} for s in self.subscores
            ]
        if self.info:
            out["info"] = self.info
        if self.content is not None:
            out["content"] = self.content
        if self.done is not None:
            out["done"] = self.done
        if self.is_error:
            out["isError"] = True
        return out


@dataclass(frozen=True, slots=True)
class Answer(Generic[T]):
    """The agent's answer parsed by a template's `returns=` type.

    `content` is the parsed value (None when parsing failed, see `error`); `raw` is what
    the agent submitted.
    """

    content: T | None
    raw: Any
    error: str | None = None
