"""Host uids of proctor's own, for what it runs as another user when it is root.

A uid from `HOST_UIDS` belongs to no account and, drawn at random from 2**28, to no other
process: nobody else on the host can signal, trace, or read `/proc` of what runs as it
(a shared uid such as `nobody` would let every other `nobody` process do all three).
"""

from __future__ import annotations

import secrets

__all__ = ["HOST_UIDS", "fresh_uid"]

HOST_UIDS = range(0x70000000, 0x7FFE0000)


def fresh_uid() -> int:
    """A random uid from `HOST_UIDS`."""
    return HOST_UIDS.start + secrets.randbelow(len(HOST_UIDS))
