"""Durable file primitives: atomic replace, append-only JSONL, torn tails, group sync.

Every write goes to the kernel (`os.write`) before the call returns, so a killed
process loses nothing already written; whether it also survives a machine crash is a
matter of fsync, which the caller asks for (`sync=True`) or batches with
`sync_filesystem`.
"""

from __future__ import annotations

import functools
import os
from collections.abc import Callable, Iterable, Iterator
from typing import Any

import orjson

__all__ = [
    "JsonlReader",
    "append_bytes",
    "fsync_dir",
    "parse_object",
    "sync_filesystem",
    "truncate_torn_tail",
    "write_all",
    "write_atomic",
    "write_atomic_chunks",
]

_CHUNK = 1 << 20


def write_all(fd: int, data: bytes) -> None:
    """Write all of `data` to `fd`, however many `os.write` calls that takes."""
    view = memoryview(data)
    while view:
        view = view[os.write(fd, view) :]


def fsync_dir(path: str) -> None:
    """fsync a directory, making the names created or renamed in it durable."""
    fd = os.open(path, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def write_atomic(path: str, data: bytes, *, sync: bool) -> None:
    """Replace `path` with `data` through a temp file in the same directory and a rename.

    A reader (or a process killed mid-call) sees the old content or the new, never a
    mix. With `sync`, the temp file is fsynced before the rename and the directory after
    it, so the new content survives a machine crash once this returns. The temp name is
    fixed per target (`.NAME.tmp`), so a temp left by a kill is overwritten by the next
    write rather than accumulating.
    """
    write_atomic_chunks(path, (data,), sync=sync)


def write_atomic_chunks(path: str, chunks: Iterable[bytes], *, sync: bool) -> None:
    """`write_atomic` for content produced piece by piece (never held whole in memory)."""
    folder, name = os.path.split(path)
    tmp = os.path.join(folder, f".{name}.tmp")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_CLOEXEC, 0o644)
    try:
        for chunk in chunks:
            write_all(fd, chunk)
        if sync:
            os.fsync(fd)
    finally:
        os.close(fd)
    os.replace(tmp, path)
    if sync:
        fsync_dir(folder or ".")


def append_bytes(path: str, data: bytes, *, sync: bool) -> None:
    """Append `data` to `path` (created if missing) with one O_APPEND write.

    With `sync`, the file is fsynced, and so is its directory when the file is new.
    """
    created = sync and not os.path.exists(path)
    fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT | os.O_CLOEXEC, 0o644)
    try:
        write_all(fd, data)
        if sync:
            os.fsync(fd)
    finally:
        os.close(fd)
    if created:
        fsync_dir(os.path.dirname(path) or ".")


def truncate_torn_tail(path: str) -> int:
    """Cut `path` back to just after its last newline; return how many bytes went.

    A JSONL file whose writer died mid-line (or whose machine crashed before the line
    reached the disk) ends without a newline; appending after it would glue the next
    record to the torn one. A missing file counts as clean.
    """
    try:
        fd = os.open(path, os.O_RDWR | os.O_CLOEXEC)
    except FileNotFoundError:
        return 0
    try:
        size = os.fstat(fd).st_size
        keep = _last_newline_end(fd, size)
        if keep < size:
            os.ftruncate(fd, keep)
        return size - keep
    finally:
        os.close(fd)


def _last_newline_end(fd: int, size: int) -> int:
    end = size
    while end > 0:
        start = max(0, end - 65536)
        chunk = os.pread(fd, end - start, start)
        at = chunk.rfind(b"\n")
        if at >= 0:
            return start + at + 1
        end = start
    return 0


def parse_object(line: bytes) -> dict[str, Any] | None:
    """A JSONL line of the layout as its JSON object; None when it is not one."""
    try:
        record = orjson.loads(line)
    except orjson.JSONDecodeError:
        return None
    return record if isinstance(record, dict) else None


class JsonlReader:
    """Iterate the JSON records of an append-only JSONL file, from byte `start`.

    A last line without its newline is a write in progress or torn by a crash: it is
    not yielded, and `torn` says how many bytes it had. A complete line that is not a
    JSON object is skipped and counted in `corrupt`. After iteration, `end` is the
    offset just past the last complete line, where a tailing reader resumes. A missing
    file yields nothing.
    """

    def __init__(self, path: str | os.PathLike[str], start: int = 0) -> None:
        self.path = os.fspath(path)
        self.start = start
        self.end = start
        self.torn = 0
        self.corrupt = 0

    def __iter__(self) -> Iterator[dict[str, Any]]:
        try:
            f = open(self.path, "rb")  # noqa: SIM115 (closed in finally, across yields)
        except FileNotFoundError:
            return
        try:
            f.seek(self.start)
            yield from self._records(f.read)
        finally:
            f.close()

    def _records(self, read: Callable[[int], bytes]) -> Iterator[dict[str, Any]]:
        rest = b""
        while chunk := read(_CHUNK):
            lines = (rest + chunk).split(b"\n")
            rest = lines.pop()
            for line in lines:
                self.end += len(line) + 1
                record = self._parse(line)
                if record is not None:
                    yield record
        self.torn = len(rest)

    def _parse(self, line: bytes) -> dict[str, Any] | None:
        if not line.strip():
            return None
        record = parse_object(line)
        if record is None:
            self.corrupt += 1
        return record


@functools.cache
def _syncfs() -> Callable[[int], int] | None:
    try:
        import ctypes

        libc = ctypes.CDLL(None, use_errno=True)
        fn = libc.syncfs
    except (OSError, AttributeError):
        return None
    fn.argtypes = [ctypes.c_int]
    fn.restype = ctypes.c_int
    return fn


def sync_filesystem(fd: int) -> None:
    """Flush every dirty page and name of the filesystem holding `fd` (one group commit).

    One `syncfs(2)` covers however many files the batch touched since the last one, so
    the cost per window does not grow with the files written in it; `os.sync()` where
    `syncfs` is unavailable.
    """
    fn = _syncfs()
    if fn is None:
        os.sync()
    elif fn(fd) != 0:
        import ctypes

        err = ctypes.get_errno()
        raise OSError(err, os.strerror(err))
