"""Folders opened one name at a time, each relative to the one before, no link followed.

What an agent or a rollout wrote is not trusted: a folder on the way that is a symbolic
link is refused (`O_NOFOLLOW`), not followed. Shared by a workspace's snapshot
(`proctor.env`) and the dashboard's file reads (`proctor.view`).
"""

from __future__ import annotations

import os
from collections.abc import Callable, Iterable

__all__ = ["DIR", "descend"]

DIR = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC
"""The flags a folder is opened with: a link in its place is refused (ELOOP)."""


def descend(fd: int, names: Iterable[str], open_at: Callable[[int, str], int] | None = None) -> int:
    """The folder `names` lead to from the folder open at `fd`, each opened with `DIR`
    relative to the one before (or by `open_at(parent, name)`, which may word its own
    errors). `fd` is taken over: closed, also when an open fails.

    Raises:
        OSError: a name is missing, not a folder, or a link.
    """
    try:
        for name in names:
            inner = os.open(name, DIR, dir_fd=fd) if open_at is None else open_at(fd, name)
            os.close(fd)
            fd = inner
    except BaseException:
        os.close(fd)
        raise
    return fd
