"""One mapping from exceptions to the `error: ...` line a user reads.

Shared by the `proctor` command and the environment server's command
(`proctor serve`, `python -m proctor.serve`): a user's mistake (a bad source or option,
a file or socket the system refuses, a peer's error) is one line on stderr and exit
code 1; any other exception is a bug and keeps its traceback.
"""

from __future__ import annotations

import sys

from ._errors import ProctorError, RemoteError

__all__ = ["print_error", "user_message"]


def user_message(exc: BaseException, *, os_context: str | None = None) -> str | None:
    """The one-line message for a user's mistake, or None for a bug (a traceback).

    Args:
        exc: what was raised.
        os_context: what was being done, put before the reason of an `OSError` that is
            no proctor error (`cannot listen on 127.0.0.1:80: Permission denied`).
    """
    if isinstance(exc, RemoteError):
        return exc.message
    if isinstance(exc, ProctorError | ValueError):
        return str(exc) or type(exc).__name__
    if isinstance(exc, OSError):
        reason = _os_reason(exc)
        return reason if os_context is None else f"{os_context}: {reason}"
    return None


def _os_reason(exc: OSError) -> str:
    """What the system refused: `FILE: reason` when it names a file, else the reason."""
    if exc.filename is not None and exc.strerror:
        return f"{exc.filename}: {exc.strerror}"
    return exc.strerror or str(exc) or type(exc).__name__


def print_error(message: str) -> None:
    """Write `error: MESSAGE` on stderr."""
    print(f"error: {message}", file=sys.stderr)
