"""Opening files of an output directory the way the dashboard may: regular files inside it.

What a rollout wrote is not trusted: a `log.txt` that is a symbolic link to
`/etc/shadow`, or an artifact linked to `/etc/passwd`, must not be shown or served. Each
name below the output directory is opened relative to its parent's descriptor with
`O_NOFOLLOW` (a link anywhere below is refused, not followed), and only a regular file
is read. The output directory itself is the path the user named, links and all.
"""

from __future__ import annotations

import errno
import os
import stat
from typing import BinaryIO

from .._nofollow import DIR, descend

__all__ = ["open_inside", "stat_inside"]

# Non-blocking: a FIFO placed in the folder must not hang the open (it is refused next).
_FILE = os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC


class _Refused(OSError):
    """A path below the output directory that is a link, or not a regular file."""


def open_inside(root: str, *names: str) -> BinaryIO:
    """`root/names...` opened for reading in binary.

    Raises:
        FileNotFoundError: it does not exist.
        _Refused: a name is a link (or not a plain name), or the file is not regular.
    """
    parent = _parent(root, names)
    try:
        fd = _at(parent, names[-1], _FILE, root, names)
    finally:
        os.close(parent)
    if not stat.S_ISREG(os.fstat(fd).st_mode):
        os.close(fd)
        raise _refused(root, names, "not a regular file")
    os.set_blocking(fd, True)
    return os.fdopen(fd, "rb")


def stat_inside(root: str, *names: str) -> os.stat_result | None:
    """The status of the regular file `root/names...`; None when it is missing, a link
    (anywhere below `root`), or not a regular file."""
    try:
        parent = _parent(root, names)
    except OSError:
        return None
    try:
        st = os.stat(names[-1], dir_fd=parent, follow_symlinks=False)
    except OSError:
        return None
    finally:
        os.close(parent)
    return st if stat.S_ISREG(st.st_mode) else None


def _parent(root: str, names: tuple[str, ...]) -> int:
    """A descriptor of the folder holding `names[-1]`, each folder opened without links."""
    if not names:
        raise ValueError("no file named")
    for name in names:
        if not name or name in (".", "..") or "/" in name or "\0" in name:
            raise _refused(root, names, f"{name!r} is not a plain name")
    fd = os.open(root, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
    return descend(fd, names[:-1], lambda parent, name: _at(parent, name, DIR, root, names))


def _at(parent: int, name: str, flags: int, root: str, names: tuple[str, ...]) -> int:
    try:
        return os.open(name, flags, dir_fd=parent)
    except OSError as exc:
        if exc.errno in (errno.ELOOP, errno.EMLINK):
            raise _refused(root, names, f"{name} is a symbolic link") from None
        if exc.errno == errno.ENOTDIR:
            raise _refused(root, names, f"{name} is not a folder") from None
        raise


def _refused(root: str, names: tuple[str, ...], why: str) -> _Refused:
    path = os.path.join(root, *names)
    return _Refused(errno.EPERM, f"{path}: {why}: the dashboard reads only regular files")
