"""Resume tokens of the sessions `proctor task start` parked, kept for `task grade`.

A token is a secret: it never goes on a command line. Each lives in a 0600 file named
after its session, in a 0700 directory of the user's (`$XDG_RUNTIME_DIR/proctor/sessions`,
else `~/.cache/proctor/sessions`), with the URL of the server that issued it; it is only
ever sent back to that URL.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import re
import stat
import time
from pathlib import Path

from ._common import CLIError

__all__ = ["forget", "recall", "remember"]

_SAFE_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,127}")


def _folder() -> Path:
    """The per-user folder, made 0700 if new; refused if anyone else could read it.

    Raises:
        CLIError: the folder belongs to another user or is open to others.
    """
    runtime = os.environ.get("XDG_RUNTIME_DIR")
    base = Path(runtime) if runtime else Path.home() / ".cache"
    folder = base / "proctor" / "sessions"
    folder.mkdir(mode=0o700, parents=True, exist_ok=True)
    info = folder.lstat()
    if not stat.S_ISDIR(info.st_mode) or info.st_uid != os.getuid():
        raise CLIError(f"{folder}: not a folder of this user; cannot keep resume tokens there")
    if info.st_mode & 0o077:
        folder.chmod(0o700)
    return folder


def _file(folder: Path, session_id: str) -> Path:
    if _SAFE_NAME.fullmatch(session_id):
        return folder / session_id
    return folder / hashlib.sha256(session_id.encode()).hexdigest()


def remember(url: str, session_id: str, resume_token: str) -> None:
    """Keep `resume_token` for `session_id` on `url` (replacing any older one)."""
    folder = _folder()
    target = _file(folder, session_id)
    tmp = folder / f".{target.name}.{os.getpid()}.tmp"
    record = {"url": url, "session_id": session_id, "resume_token": resume_token,
              "started": time.time()}  # fmt: skip
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o600)
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as file:
            json.dump(record, file)
        os.replace(tmp, target)
    except BaseException:
        with contextlib.suppress(OSError):
            tmp.unlink()
        raise


def recall(url: str, session_id: str | None) -> tuple[str, str | None] | None:
    """The session to resume on `url` and its token.

    With `session_id`: that session, with its token if one was kept for this URL.
    Without: the session most recently started on `url`, or None if there is none.
    """
    folder = _folder()
    if session_id is not None:
        record = _read(_file(folder, session_id))
        if record is None or record["url"] != url or record["session_id"] != session_id:
            return session_id, None
        return session_id, record["resume_token"]
    latest: dict[str, str] | None = None
    for path in folder.iterdir():
        record = _read(path)
        if record is None or record["url"] != url:
            continue
        if latest is None or float(record["started"]) > float(latest["started"]):
            latest = record
    return None if latest is None else (latest["session_id"], latest["resume_token"])


def forget(session_id: str) -> None:
    """Drop the token of `session_id` (graded, or gone from the server)."""
    with contextlib.suppress(OSError):
        _file(_folder(), session_id).unlink()


def _read(path: Path) -> dict[str, str] | None:
    if path.name.startswith("."):
        return None
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW)
        with os.fdopen(fd, encoding="utf-8") as file:
            record = json.load(file)
    except (OSError, ValueError):
        return None
    keys = ("url", "session_id", "resume_token", "started")
    if not isinstance(record, dict) or not all(k in record for k in keys):
        return None
    if not isinstance(record["started"], int | float):
        return None
    return {k: str(record[k]) for k in keys}
