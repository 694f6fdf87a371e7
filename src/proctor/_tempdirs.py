"""Private temp folders named after their owner, so a killed owner's are found and removed.

`owned_tempdir("fwd")` makes `proctor-fwd-<pid>-<start>-<random>` (mode 0700) in the
system's temp folder, after removing this user's `proctor-fwd-*` folders whose owner is
gone. The owner is its pid and its start time (`/proc/PID/stat`), so a reused pid is not
taken for it. A `kill -9` skips every `finally`; the next owner of the kind cleans up.
"""

from __future__ import annotations

import contextlib
import os
import re
import shutil
import stat
import tempfile
from pathlib import Path

__all__ = ["owned_tempdir", "owner", "stat_fields", "sweep"]


def stat_fields(pid: int) -> list[str] | None:
    """The fields of `/proc/PID/stat` after the command name, the state first and the
    start time at [19] (None if the process is gone)."""
    try:
        text = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    # The command name (field 2) may hold spaces and parentheses: split after it.
    return text[text.rindex(")") + 2 :].split()


def owner(pid: int) -> str | None:
    """`PID-START` of a live process (its start time in /proc/PID/stat), else None."""
    fields = stat_fields(pid)
    return None if fields is None or fields[0] == "Z" else f"{pid}-{fields[19]}"


def sweep(kind: str, tmpdir: str | Path | None = None) -> list[Path]:
    """Remove this user's `proctor-<kind>-PID-START-*` folders whose owner is gone."""
    folder = tmpdir if tmpdir is not None else tempfile.gettempdir()
    pattern = re.compile(rf"proctor-{re.escape(kind)}-(\d+)-(\d+)-.+")
    removed = []
    try:
        entries = list(os.scandir(folder))
    except OSError:
        return []
    for entry in entries:
        found = pattern.fullmatch(entry.name)
        if found is None or owner(int(found[1])) == f"{found[1]}-{found[2]}":
            continue
        with contextlib.suppress(OSError):
            info = entry.stat(follow_symlinks=False)
            if stat.S_ISDIR(info.st_mode) and info.st_uid == os.geteuid():
                shutil.rmtree(entry.path)
                removed.append(Path(entry.path))
    return removed


def owned_tempdir(kind: str, tmpdir: str | Path | None = None) -> str:
    """A fresh 0700 folder `proctor-<kind>-<pid>-<start>-*`, after a `sweep` of the kind."""
    sweep(kind, tmpdir)
    me = owner(os.getpid()) or f"{os.getpid()}-0"
    return tempfile.mkdtemp(prefix=f"proctor-{kind}-{me}-", dir=tmpdir)
