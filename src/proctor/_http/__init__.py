"""A lean asyncio HTTP/1.1 server and client, and server-sent events.

Private to proctor: the interception proxy, the fake model server and the dashboard
build on it. Built on asyncio protocols (uvloop works too) for speed.
"""

from .._errors import Abort
from ._client import ClientResponse, HttpClient
from ._headers import Headers, HeaderSource, as_pairs
from ._limits import HttpLimits
from ._message import Handler, Request, Response, Screen, Share
from ._server import HttpServer
from ._sse import SSEEvent, SSEParser, format_sse

__all__ = [
    "Abort",
    "ClientResponse",
    "Handler",
    "HeaderSource",
    "Headers",
    "HttpClient",
    "HttpLimits",
    "HttpServer",
    "Request",
    "Response",
    "SSEEvent",
    "SSEParser",
    "Screen",
    "Share",
    "as_pairs",
    "format_sse",
]
