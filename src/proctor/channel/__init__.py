"""The wire: control channel v1 server and client (see DESIGN section 3)."""

from ._client import Client, Manifest, connect
from ._framing import MAX_FRAME
from ._server import DEFAULT_PARK_TTL, MAX_FIRST_FRAME, Server

__all__ = [
    "DEFAULT_PARK_TTL",
    "MAX_FIRST_FRAME",
    "MAX_FRAME",
    "Client",
    "Manifest",
    "Server",
    "connect",
]
