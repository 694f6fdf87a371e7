"""`Workspace`: a folder whose files are snapshotted before and after the agent's turn.

The agent controls the folder, so a snapshot trusts nothing in it. Every name is opened
relative to its parent's descriptor with `O_NOFOLLOW`: a symbolic link is recorded as a
link (its target text), never followed; only regular files are opened (non-blocking, so
a FIFO put in their place cannot hang the open) and a FIFO, socket or device is recorded
by its kind alone. The walk is bounded: `max_files` entries, `_MAX_DEPTH` levels, at
most `max_hash_bytes` read per file, and the text kept is capped.

Change detection is by the status a file's owner cannot forge: a file whose inode,
size, mtime and ctime (which `utime` cannot set back) all equal the first snapshot's is
unchanged and not read again; any other is hashed (SHA-256) and compared. A file changed
within `_RACY_NS` of the first snapshot is hashed then and again at the second, so a
write in the same clock tick is not missed.
"""

from __future__ import annotations

import fnmatch
import hashlib
import os
import re
import stat
import time
from collections.abc import Iterable
from dataclasses import dataclass, field

from .._errors import TemplateError
from .._nofollow import DIR, descend

__all__ = ["Snapshot", "Workspace"]

_FILE = os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_NOCTTY | os.O_CLOEXEC
_CHUNK = 1 << 20
_MAX_DEPTH = 128
_RACY_NS = 2_000_000_000
_BEFORE_TEXT = 16 * 1024 * 1024  # text the first snapshot keeps for diffs, in all
_HASH_TOTAL = 4 * 1024 * 1024 * 1024  # bytes one snapshot reads to hash, in all
_MAX_ERRORS = 20
_CONTROL = re.compile(rb"[\x00-\x08\x0b\x0e-\x1f\x7f]")
_KINDS = (
    (stat.S_ISREG, "file"),
    (stat.S_ISDIR, "dir"),
    (stat.S_ISLNK, "link"),
    (stat.S_ISFIFO, "fifo"),
    (stat.S_ISSOCK, "socket"),
    (stat.S_ISCHR, "device"),
    (stat.S_ISBLK, "device"),
)


@dataclass(slots=True)
class Entry:
    """One path as a snapshot saw it."""

    kind: str
    mode: int
    size: int
    key: tuple[int, int, int, int, int]  # inode, device, size, mtime_ns, ctime_ns
    digest: str | None = None
    text: str | None = None
    target: str | None = None  # a link's
    racy: bool = False
    note: str | None = None  # why there is no digest


@dataclass(slots=True)
class Snapshot:
    """The entries of one walk, by relative POSIX path, in walk order.

    `horizon` is the last path's components when the walk stopped at `max_files`
    (paths after it were not seen); None when it saw everything.
    """

    entries: dict[str, Entry] = field(default_factory=dict)
    horizon: tuple[str, ...] | None = None
    errors: list[str] = field(default_factory=list)
    started_ns: int = 0
    text_bytes: int = 0
    hashed_bytes: int = 0

    def error(self, text: str) -> None:
        if len(self.errors) < _MAX_ERRORS:
            self.errors.append(text)


@dataclass(frozen=True, slots=True)
class Workspace:
    """A tracked folder and its bounds (`Environment.track_workspace`).

    `path` is resolved (links followed: the author's choice) when the first snapshot
    is taken, before the agent acts; below it no link is followed.
    """

    path: str
    include: tuple[str, ...] = ()
    exclude: tuple[str, ...] = ()
    max_files: int = 100_000
    max_text_bytes: int = 64 * 1024
    max_total_text: int = 1024 * 1024
    max_hash_bytes: int = 1024 * 1024 * 1024

    @classmethod
    def of(
        cls,
        path: str | os.PathLike[str],
        include: Iterable[str],
        exclude: Iterable[str],
        max_files: int,
        max_text_bytes: int,
        max_total_text: int,
        max_hash_bytes: int,
    ) -> Workspace:
        """A checked `Workspace`.

        Raises:
            TemplateError: an empty path, a pattern that is not a string, or a bound
                that is not a positive integer.
        """
        text = os.fspath(path)
        if not text:
            raise TemplateError("track_workspace: path is empty")
        bounds = {
            "max_files": max_files,
            "max_text_bytes": max_text_bytes,
            "max_total_text": max_total_text,
            "max_hash_bytes": max_hash_bytes,
        }
        for name, value in bounds.items():
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                raise TemplateError(
                    f"track_workspace: {name} must be an integer >= 1; got {value!r}"
                )
        patterns = {"include": tuple(include), "exclude": tuple(exclude)}
        for name, values in patterns.items():
            bad = [p for p in values if not isinstance(p, str) or not p]
            if bad:
                raise TemplateError(
                    f"track_workspace: {name} patterns must be strings; got {bad[0]!r}"
                )
        return cls(text, patterns["include"], patterns["exclude"], **bounds)

    def resolve(self) -> str:
        """The absolute path, links followed (done once, before the agent acts)."""
        return os.path.realpath(self.path)

    def snapshot(self, root: str, before: Snapshot | None = None) -> Snapshot:
        """Walk `root` (a resolved path). The first snapshot (`before` None) hashes
        small and recently changed files; the second hashes what changed since `before`."""
        snap = Snapshot(started_ns=time.time_ns())
        try:
            fd = _open_root(root)
        except OSError as exc:
            if not isinstance(exc, FileNotFoundError):
                snap.error(f"{root}: {exc.strerror or exc}")
            return snap
        try:
            _Walk(self, snap, before).run(fd)
        finally:
            os.close(fd)
        return snap

    def matches(self, rel: str, is_dir: bool) -> tuple[bool, bool]:
        """(record it, descend into it) for the relative path `rel`."""
        if any(fnmatch.fnmatchcase(rel, p) for p in self.exclude):
            return False, False
        if not self.include:
            return True, is_dir
        return any(fnmatch.fnmatchcase(rel, p) for p in self.include), is_dir


def _open_root(root: str) -> int:
    """`root` opened component by component from `/`, no link followed (an agent that
    swapped a folder above the workspace for a link is refused, not followed)."""
    return descend(os.open("/", DIR), [p for p in root.split("/") if p])


class _Walk:
    """One depth-first walk in sorted name order (so walk order is path order)."""

    def __init__(self, spec: Workspace, snap: Snapshot, before: Snapshot | None) -> None:
        self.spec = spec
        self.snap = snap
        self.before = before
        self.full = False

    def run(self, fd: int) -> None:
        self._dir(fd, (), 0)

    def _dir(self, fd: int, parts: tuple[str, ...], depth: int) -> None:
        try:
            names = sorted(os.listdir(fd))
        except OSError as exc:
            self.snap.error(f"{'/'.join(parts) or '.'}: {exc.strerror or exc}")
            return
        for name in names:
            if self.full:
                return
            self._one(fd, name, (*parts, name), depth)

    def _one(self, fd: int, name: str, parts: tuple[str, ...], depth: int) -> None:
        rel = "/".join(parts)
        try:
            st = os.stat(name, dir_fd=fd, follow_symlinks=False)
        except OSError as exc:
            if not isinstance(exc, FileNotFoundError):  # gone since the listing: not there
                self.snap.error(f"{rel}: {exc.strerror or exc}")
            return
        is_dir = stat.S_ISDIR(st.st_mode)
        record, descend = self.spec.matches(rel, is_dir)
        if record:
            if len(self.snap.entries) >= self.spec.max_files:
                self.full = True
                self.snap.horizon = tuple(next(reversed(self.snap.entries)).split("/"))
                return
            self.snap.entries[rel] = self._entry(fd, name, rel, st)
        if descend and depth + 1 < _MAX_DEPTH:
            try:
                inner = os.open(name, DIR, dir_fd=fd)
            except OSError as exc:  # replaced by a link or a file since the stat
                self.snap.error(f"{rel}: {exc.strerror or exc}")
                return
            try:
                self._dir(inner, parts, depth + 1)
            finally:
                os.close(inner)

    def _entry(self, fd: int, name: str, rel: str, st: os.stat_result) -> Entry:
        kind = next((k for test, k in _KINDS if test(st.st_mode)), "other")
        key = (st.st_ino, st.st_dev, st.st_size, st.st_mtime_ns, st.st_ctime_ns)
        entry = Entry(kind, stat.S_IMODE(st.st_mode), st.st_size if kind == "file" else 0, key)
        if kind == "link":
            try:
                entry.target = os.readlink(name, dir_fd=fd)[:4096]
            except OSError as exc:
                self.snap.error(f"{rel}: {exc.strerror or exc}")
        elif kind == "file":
            self._file(fd, name, rel, entry)
        return entry

    def _file(self, fd: int, name: str, rel: str, entry: Entry) -> None:
        spec, snap, before = self.spec, self.snap, self.before
        entry.racy = entry.key[4] >= snap.started_ns - _RACY_NS
        if before is None:
            wanted = entry.size <= spec.max_text_bytes or entry.racy
        else:
            old = before.entries.get(rel)
            same = old is not None and old.kind == "file" and old.key == entry.key
            wanted = not same or old.racy  # type: ignore[union-attr]
        if not wanted:
            return
        if entry.size > spec.max_hash_bytes:
            entry.note = f"not hashed: over {spec.max_hash_bytes:,} bytes"
            return
        if snap.hashed_bytes + entry.size > _HASH_TOTAL:
            entry.note = f"not hashed: this snapshot read {_HASH_TOTAL:,} bytes already"
            return
        self._read(fd, name, rel, entry, entry.size <= spec.max_text_bytes)

    def _read(self, fd: int, name: str, rel: str, entry: Entry, keep: bool) -> None:
        """Hash the file; with `keep`, its text too while the budget lasts."""
        try:
            file = os.open(name, _FILE, dir_fd=fd)
        except OSError as exc:
            self.snap.error(f"{rel}: {exc.strerror or exc}")
            return
        try:
            st = os.fstat(file)
            if not stat.S_ISREG(st.st_mode):  # swapped since the stat: not read
                entry.note = "not read: no longer a regular file"
                return
            digest, data, total = hashlib.sha256(), bytearray(), 0
            limit = self.spec.max_hash_bytes
            while total <= limit:
                chunk = os.read(file, _CHUNK)
                if not chunk:
                    break
                total += len(chunk)
                digest.update(chunk)
                if keep and len(data) <= self.spec.max_text_bytes:
                    data += chunk
        except OSError as exc:
            self.snap.error(f"{rel}: {exc.strerror or exc}")
            return
        finally:
            os.close(file)
        self.snap.hashed_bytes += total
        if total > limit:  # grew past the limit while read
            entry.note = f"not hashed: over {limit:,} bytes"
            return
        entry.digest = digest.hexdigest()
        text = _text(bytes(data)) if keep and total <= self.spec.max_text_bytes else None
        if text is None:
            return
        budget = _BEFORE_TEXT if self.before is None else self.spec.max_total_text
        if self.snap.text_bytes + total > budget:
            entry.note = "text not kept: the text budget is spent"
            return
        entry.text = text
        self.snap.text_bytes += total


def _text(data: bytes) -> str | None:
    """`data` as text when it is UTF-8 without NUL or other control bytes but tab, line
    and page breaks (so it shows as text and stays small as JSON)."""
    if _CONTROL.search(data):
        return None
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError:
        return None
