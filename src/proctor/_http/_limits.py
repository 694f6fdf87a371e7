"""`HttpLimits`: what clients can make an `HttpServer` hold, and for how long."""

from __future__ import annotations

import contextlib
import math
import resource
from dataclasses import dataclass, fields

__all__ = ["HttpLimits"]


@dataclass(frozen=True, slots=True)
class HttpLimits:
    """Bounds on an `HttpServer`'s connections, buffered bytes and read deadlines.

    The defaults are generous for model traffic on a local network and still keep a
    misbehaving or hostile client from holding memory or sockets for long.

    Args:
        max_connections: open connections at most (further capped at half the process's
            open-file limit). At the cap, the connection idle the longest (between
            requests, or still sending its head) is closed to make room; when none is,
            the new connection gets 503 (`retry-after: 1`) and is closed.
        max_buffered: request bytes held at once over all connections: heads being
            read, and bodies from their head (a `Content-Length` is reserved in full,
            unless the screen charged the request to a `Share`: then its bytes count
            as they arrive) until their response is sent. A request that would go over
            gets 503 (`retry-after: 1`) and its connection is closed.
        max_head: the largest request head, in bytes (431 beyond).
        max_body: the largest request body, in bytes (413 beyond).
        head_timeout: seconds for a request head to arrive once its first byte has
            (408 and close beyond).
        body_timeout: seconds for a request body to arrive once its head has, whatever
            its pace (408 and close beyond): a trickled body is cut off.
        idle_timeout: seconds a connection may wait for a request's first byte (a new
            one, or a kept-alive one between requests) before it is closed quietly.

    Raises:
        ValueError: a field is not positive, or `max_buffered` is below `max_body`.
    """

    max_connections: int = 4096
    max_buffered: int = 1024 * 1024 * 1024
    max_head: int = 16 * 1024
    max_body: int = 64 * 1024 * 1024
    head_timeout: float = 30.0
    body_timeout: float = 120.0
    idle_timeout: float = 300.0

    def __post_init__(self) -> None:
        for f in fields(self):
            value = getattr(self, f.name)
            if not isinstance(value, int | float) or math.isnan(value) or value <= 0:
                raise ValueError(f"HttpLimits.{f.name} must be positive, got {value!r}")
        if self.max_buffered < self.max_body:
            raise ValueError("HttpLimits.max_buffered must be at least max_body")

    def connection_cap(self) -> int:
        """`max_connections`, lowered to half the open-file limit (raised to its hard
        limit first), so the cap, not `accept()` failing, is what turns clients away."""
        soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
        if soft != resource.RLIM_INFINITY and (hard == resource.RLIM_INFINITY or soft < hard):
            with contextlib.suppress(ValueError, OSError):
                resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))
                soft = hard
        if soft == resource.RLIM_INFINITY:
            return self.max_connections
        return max(1, min(self.max_connections, soft // 2))

    @property
    def sweep_interval(self) -> float:
        """How often deadlines are checked: a quarter of the shortest, at most 1 s."""
        shortest = min(self.head_timeout, self.body_timeout, self.idle_timeout)
        return max(0.005, min(1.0, shortest / 4))
