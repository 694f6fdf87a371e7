"""The wire: control channel v1 server and client (see DESIGN section 3)."""

from .._public import publish
from ._client import EnvClient, Manifest, connect
from ._framing import MAX_FRAME
from ._messages import METHOD_NOT_FOUND
from ._server import DEFAULT_PARK_TTL, MAX_FIRST_FRAME, EnvServer

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

publish(
    globals(),
    __all__,
    __name__,
    deprecated={"Client": "proctor.channel.EnvClient", "Server": "proctor.channel.EnvServer"},
)
