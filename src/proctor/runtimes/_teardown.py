"""A served environment's failed shutdown hooks, as its runtime hears and raises them.

`proctor.serve` writes `PROCTOR_TEARDOWN_ERROR=<pid> <type>: <message>` on stderr when a
shutdown hook raises (a warm sandbox's rollout reports it on its channel instead); the
runtime that stopped the process raises `TeardownError` after its teardown, so the
rollout records it in the teardown phase.
"""

from __future__ import annotations

from .._errors import TeardownError
from ..serve import SHUTDOWN_FAILED, TEARDOWN_PREFIX

__all__ = ["MARK", "check_teardown", "parse_report"]

MARK = TEARDOWN_PREFIX.encode()


def parse_report(line: bytes) -> tuple[int, str]:
    """The pid and the reason of a `MARK` line (pid -1 if unreadable)."""
    pid, _, why = line[len(MARK) :].decode(errors="replace").partition(" ")
    return (int(pid) if pid.isdigit() else -1), why


def check_teardown(why: str | None) -> None:
    """Raise what the environment's shutdown hooks reported, if anything."""
    if why is not None:
        raise TeardownError(SHUTDOWN_FAILED + why)
