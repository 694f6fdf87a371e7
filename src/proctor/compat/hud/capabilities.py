"""HUD's `Capability` with its factories for the protocols proctor's agents speak."""

from __future__ import annotations

import os
from dataclasses import dataclass
from typing import Any
from urllib.parse import urlsplit

from ...env import Capability as _Capability
from .._scope import unsupported

__all__ = ["Capability"]


@dataclass(frozen=True, slots=True)
class Capability(_Capability):
    """HUD's `(name, protocol, url, params)`: proctor's `Capability`, plus HUD's
    `ssh(...)` (`ssh/2`) and `mcp(...)` (`mcp/2025-11-25`) factories."""

    @classmethod
    def ssh(
        cls,
        *,
        name: str = "shell",
        url: str,
        user: str = "agent",
        host_pubkey: str,
        client_key: str | None = None,
        client_key_path: str | os.PathLike[str] | None = None,
        shell: str | None = None,
        cwd: str | None = None,
    ) -> Capability:
        """An SSH daemon with public key login, as HUD publishes it (`ssh/2`)."""
        params: dict[str, Any] = {"user": user, "host_pubkey": host_pubkey}
        params["shell"] = shell or "bash"
        optional = {"client_key": client_key, "cwd": cwd}
        optional["client_key_path"] = os.fspath(client_key_path) if client_key_path else None
        params.update((k, v) for k, v in optional.items() if v is not None)
        return cls(name, "ssh/2", _with_port(url, "ssh", 22), params)

    @classmethod
    def mcp(
        cls,
        *,
        name: str = "tools",
        url: str,
        auth_token: str | None = None,
        transport: str | None = None,
    ) -> Capability:
        """An MCP server over streamable HTTP, as HUD publishes it (`mcp/2025-11-25`).

        Raises:
            ImportError: a WebSocket or SSE transport (proctor's agents speak neither).
        """
        scheme = urlsplit(url).scheme if "://" in url else "ws"
        if scheme not in ("http", "https") or transport not in (None, "streamable-http"):
            raise _unmapped(f"Capability.mcp(transport={transport!r}, url={url!r})")
        params: dict[str, Any] = {"transport": "streamable-http"}
        if auth_token is not None:
            params["auth_token"] = auth_token
        return cls(name, "mcp/2025-11-25", url, params)


def _with_port(url: str, scheme: str, port: int) -> str:
    """HUD's `normalize_url`: a scheme and a port when the URL lacks them."""
    full = url if "://" in url else f"{scheme}://{url}"
    parts = urlsplit(full)
    if parts.port is not None:
        return full
    return full.replace(parts.netloc, f"{parts.netloc}:{port}", 1)


def _unmapped(what: str) -> ImportError:
    return ImportError(f"{what} is not supported by proctor's HUD compatibility layer")


__getattr__ = unsupported("hud.capabilities", __all__)
