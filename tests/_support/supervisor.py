"""Finding a batch's lease supervisor (`proctor.batch._supervisor`) by its command line."""

from __future__ import annotations

import os
from pathlib import Path


def supervisor_pid(out: Path) -> int:
    """The pid of the lease supervisor of the batch in folder `out`."""
    for pid in os.listdir("/proc"):
        if pid.isdigit():
            try:
                argv = Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")
            except OSError:
                continue
            if b"proctor.batch._supervisor" in argv and str(out).encode() in argv:
                return int(pid)
    raise AssertionError("no supervisor")
