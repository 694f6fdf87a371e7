"""One mapping from exceptions to the `error: ...` line a user reads.

Shared by the `proctor` command and the environment server's command
(`proctor serve`, `python -m proctor.serve`): a user's mistake (a bad source or option,
a file or socket the system refuses, a peer's error) is one line on stderr and exit
code 1; any other exception is a bug and keeps its traceback.

Tracebacks of user code (a template, an agent) are kept on the run record and sent over
the wire: `format_traceback` bounds them (the last `MAX_FRAMES` frames of each exception,
at most `MAX_TRACEBACK` bytes: a cut keeps the start and the end) and redacts them (the
value of every environment variable whose name looks secret becomes `[redacted]`).
`PROCTOR_DEBUG=1` (`debugging()`) makes the commands print full tracebacks.
"""

from __future__ import annotations

import os
import re
import sys
import traceback
from collections.abc import Mapping

from ._errors import ProctorError, RemoteError

__all__ = [
    "MAX_FRAMES",
    "MAX_TRACEBACK",
    "debugging",
    "error_traceback",
    "format_traceback",
    "print_error",
    "print_remote_traceback",
    "redact",
    "remote_traceback",
    "user_message",
]

MAX_FRAMES = 30  # per exception of a chain, the innermost kept
MAX_TRACEBACK = 16 * 1024  # bytes of UTF-8, the end kept
REDACTED = "[redacted]"
_SECRET_NAME = re.compile("KEY|TOKEN|SECRET|PASSW|CRED|AUTH", re.IGNORECASE)
_MIN_SECRET = 8  # shorter values are too likely to be ordinary words
_ON_THIS_SIDE = "\nThe environment server answered with that error; on this side:\n\n"


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


def debugging() -> bool:
    """`PROCTOR_DEBUG` is set (to anything but the empty string): print full tracebacks."""
    return bool(os.environ.get("PROCTOR_DEBUG"))


def redact(text: str, environ: Mapping[str, str] | None = None) -> str:
    """`text` with the value of every secret-looking variable of `environ` (default: this
    process's) replaced by `[redacted]`: names with KEY, TOKEN, SECRET, PASSW, CRED or
    AUTH, values of 8 characters or more."""
    env = os.environ if environ is None else environ
    secrets = {v for k, v in env.items() if len(v) >= _MIN_SECRET and _SECRET_NAME.search(k)}
    for value in sorted(secrets, key=len, reverse=True):  # a longer one may contain another
        text = text.replace(value, REDACTED)
    return text


def format_traceback(exc: BaseException, *, max_bytes: int = MAX_TRACEBACK) -> str | None:
    """`exc`'s formatted traceback (its chain included), redacted and bounded; None when
    it was never raised."""
    if exc.__traceback__ is None:
        return None
    text = "".join(traceback.format_exception(exc, limit=-MAX_FRAMES))
    return _bound(redact(text), max_bytes)


def remote_traceback(exc: BaseException) -> str | None:
    """The environment server's traceback carried by a `RemoteError` in `exc`'s chain
    (`data.traceback` of the JSON-RPC error), or None."""
    seen: set[int] = set()
    current: BaseException | None = exc
    while current is not None and id(current) not in seen:
        seen.add(id(current))
        if isinstance(current, RemoteError) and isinstance(current.data, dict):
            text = current.data.get("traceback")
            if isinstance(text, str) and text:
                return text
        current = current.__cause__ or current.__context__
    return None


def error_traceback(exc: BaseException) -> str | None:
    """What a run record keeps: the server's traceback first (if any), then the local
    one, redacted and at most `MAX_TRACEBACK` bytes in all; None when there is neither."""
    remote = remote_traceback(exc)
    if remote is None:
        return format_traceback(exc)
    local = format_traceback(exc, max_bytes=MAX_TRACEBACK // 4) or ""
    tail = _ON_THIS_SIDE + local if local else ""
    room = MAX_TRACEBACK - len(tail.encode())
    return _bound(redact(remote), room) + tail


def print_remote_traceback(exc: BaseException) -> None:
    """Write the environment server's traceback behind `exc` on stderr, if it sent one."""
    remote = remote_traceback(exc)
    if remote is not None:
        print(f"The environment server's traceback:\n{redact(remote)}", file=sys.stderr)


def _bound(text: str, max_bytes: int) -> str:
    """`text` if it fits in `max_bytes` of UTF-8, else its first quarter and its end
    around a line saying how much was cut (the frames, then the innermost ones)."""
    data = text.encode()
    if len(data) <= max_bytes:
        return text
    room = max(max_bytes - 64, 0)  # the marker line fits in 64 bytes
    head = data[: room // 4].decode(errors="ignore")
    tail = data[len(data) - (room - room // 4) :].decode(errors="ignore")
    cut = len(data) - len(head.encode()) - len(tail.encode())
    return f"{head}\n[... {cut} bytes of traceback cut ...]\n{tail}"
