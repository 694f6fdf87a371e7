"""The wire: control channel v1 server and client (see DESIGN section 3)."""

from __future__ import annotations

from .._public import lazy_exports

TYPE_CHECKING = False  # typing's constant, without importing typing (mypy reads it so)

__all__ = [
    "DEFAULT_PARK_TTL",
    "MAX_FIRST_FRAME",
    "MAX_FRAME",
    "METHOD_NOT_FOUND",
    "EnvClient",
    "EnvServer",
    "Manifest",
    "connect",
]
_EXPORTS = {
    "DEFAULT_PARK_TTL": "._server",
    "MAX_FIRST_FRAME": "._server",
    "MAX_FRAME": "._framing",
    "METHOD_NOT_FOUND": "._messages",
    "EnvClient": "._client",
    "EnvServer": "._server",
    "Manifest": "._client",
    "connect": "._client",
}

if TYPE_CHECKING:
    from ._client import EnvClient, Manifest, connect
    from ._framing import MAX_FRAME
    from ._messages import METHOD_NOT_FOUND
    from ._server import DEFAULT_PARK_TTL, MAX_FIRST_FRAME, EnvServer
else:
    __getattr__, __dir__ = lazy_exports(
        __name__,
        _EXPORTS,
        deprecated={"Client": "proctor.channel.EnvClient", "Server": "proctor.channel.EnvServer"},
    )
