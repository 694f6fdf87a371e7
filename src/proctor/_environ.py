"""The environment proctor hands to processes it starts: an allowlist, never the whole.

The driver's environment holds provider keys and tokens under any name; an environment
server, and the shell commands an agent runs through it, get only variables that say
where things are and how to print (`SAFE`, `LC_*`), plus what the caller names or sets.
"""

from __future__ import annotations

import os
from collections.abc import Iterable

__all__ = ["SAFE", "allowed_environ"]

SAFE = frozenset(
    {
        "PATH", "HOME", "USER", "LOGNAME", "SHELL", "TMPDIR", "LANG", "LANGUAGE", "TERM",
        "TZ", "PYTHONPATH", "VIRTUAL_ENV", "XDG_RUNTIME_DIR",
    }
)  # fmt: skip


def allowed_environ(names: Iterable[str] = ()) -> dict[str, str]:
    """This process's variables in `SAFE`, `LC_*` and `names` (those that are set)."""
    keep = SAFE | frozenset(names)
    return {k: v for k, v in os.environ.items() if k in keep or k.startswith("LC_")}
