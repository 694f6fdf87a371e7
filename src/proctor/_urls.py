"""Capability and endpoint URLs: TCP host:port or a Unix socket path.

A leaf module (standard library only), so the environment side and the wire side both
use it without importing each other.
"""

from __future__ import annotations

from urllib.parse import quote, unquote, urlsplit

__all__ = ["host_port", "http_unix_url", "unix_path", "with_unix_path"]


def host_port(url: str) -> tuple[str, int]:
    """Host and port of a capability or endpoint URL (`tcp://h:p`, `ssh://u@h:p`, ...).

    Raises:
        ValueError: the URL names no host or port.
    """
    parts = urlsplit(url if "://" in url else f"tcp://{url}")
    if not parts.hostname or parts.port is None:
        raise ValueError(f"{url!r} names no host:port")
    return parts.hostname, parts.port


def unix_path(url: str) -> str | None:
    """The socket path of a Unix-socket URL, or None for a TCP-style URL.

    Two forms: `unix:///abs/path` (a raw byte stream: the control channel, the shell)
    and `http+unix://<percent-encoded abs path>/<http path>` (HTTP over a Unix socket,
    e.g. an MCP server); see `http_unix_url`.

    Raises:
        ValueError: a Unix URL whose path is not absolute.
    """
    scheme, _, rest = url.partition("://")
    if scheme == "unix":
        path = rest
    elif scheme.endswith("+unix"):
        path = unquote(rest.split("/", 1)[0])
    else:
        return None
    if not path.startswith("/"):
        raise ValueError(f"{url!r}: a Unix socket URL names an absolute path")
    return path


def http_unix_url(socket_path: str, path: str = "/", scheme: str = "http") -> str:
    """`http+unix://...` for HTTP served on `socket_path` at `path`."""
    path = path if path.startswith("/") else "/" + path
    return f"{scheme}+unix://{quote(socket_path, safe='')}{path}"


def with_unix_path(url: str, socket_path: str) -> str:
    """The Unix-socket URL `url` pointing at `socket_path` instead (scheme and HTTP path kept).

    Raises:
        ValueError: `url` is not a Unix-socket URL.
    """
    scheme, _, rest = url.partition("://")
    if scheme == "unix":
        return f"unix://{socket_path}"
    if scheme.endswith("+unix"):
        _, slash, tail = rest.partition("/")
        return f"{scheme}://{quote(socket_path, safe='')}{slash}{tail}"
    raise ValueError(f"{url!r} is not a Unix socket URL")
