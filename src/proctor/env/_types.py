"""Values a template author touches: capabilities and typed answers."""

from __future__ import annotations

from dataclasses import dataclass, field, fields
from typing import Any, Generic, TypeVar

__all__ = ["Answer", "Capability"]

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
        """The binding as it travels in `hello`: every field, by name."""
        return {f.name: getattr(self, f.name) for f in fields(self)}

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
class Answer(Generic[T]):
    """The agent's answer parsed by a template's `returns=` type.

    `content` is the parsed value (None when parsing failed, see `error`); `raw` is what
    the agent submitted.
    """

    content: T | None
    raw: Any
    error: str | None = None
