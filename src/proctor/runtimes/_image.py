"""`python_image`: a container image of this machine's Python and proctor, no registry needed.

The image is a root filesystem holding only what `python -m proctor.serve` needs here:
the interpreter and the shared libraries it links (found with `ldd`), the standard
library (without its tests, IDLE, Tk and the like), and the installed files of the
requested distributions and their dependencies, each at the same path as on this
machine (an editable install brings its source folder). With `computer=True` it
also holds what a desktop and a browser need (`_image_computer`). It is loaded with
`podman import` / `docker import` (no registry, no Dockerfile) and tagged with a hash
of its content, so building again with nothing changed is a lookup.
"""

from __future__ import annotations

import hashlib
import io
import marshal
import os
import re
import stat
import struct
import subprocess
import sys
import sysconfig
import tarfile
import tempfile
from collections.abc import Callable, Iterator, Sequence
from importlib import metadata
from importlib.util import MAGIC_NUMBER, cache_from_source
from pathlib import Path
from typing import IO

from .._errors import RuntimeLaunchError
from ._container import Engine, resolve_engine
from ._image_computer import CHROMIUM, CHROMIUM_SKIP, DISTRIBUTIONS, LINKS, computer_files

__all__ = ["python_image"]

DEFAULT_REPOSITORY = "localhost/proctor-python"
COMPUTER_REPOSITORY = "localhost/proctor-computer"
_FORMAT = b"proctor-python-image/2"  # bump when the layout below changes
# Top-level names in the standard library folder that a server never needs.
_STDLIB_SKIP = frozenset(
    {"site-packages", "idlelib", "tkinter", "turtledemo", "ensurepip", "lib2to3", "pydoc_data"}
)
_SKIP_DIRS = frozenset({"test", "tests"})  # anywhere in the standard library
_CACHES = frozenset({"__pycache__"})  # in source folders: bytecode is made afresh
_SKIP_FILE = re.compile(r"\.opt-[12]\.pyc$")  # bytecode for -O and -OO only
_DYNLOAD_SKIP = re.compile(r"^(_tkinter|_test|_xx|xx|_ctypes_test)")
_TK = frozenset({"tkinter"})  # kept with computer=True: desktop apps may use it
_KEEP = 3  # newest images of the repository kept when a new one is built
_ETC = {
    "etc/passwd": b"root:x:0:0:root:/root:/bin/sh\nnobody:x:65534:65534:nobody:/:/bin/sh\n",
    "etc/group": b"root:x:0:\nnogroup:x:65534:\n",
}


def python_image(
    *,
    engine: Engine | None = None,
    distributions: Sequence[str] = ("proctor",),
    paths: Sequence[str | Path] = (),
    repository: str | None = None,
    computer: bool = False,
) -> str:
    """Build (or find) an image of this interpreter with `distributions` installed.

    Blocking: call it once before a batch (or in a session fixture); it takes about
    3 s the first time (~85 MB) and a content hash (~0.6 s) after, and keeps the three
    newest images of `repository`. `python` on the image's `PATH` is this interpreter
    (`sys.executable`), so `ContainerRuntime(image, source)` can run
    `python -m proctor.serve` in it; there is no shell or other program.

    With `computer=True` the image also runs `env.add_desktop` and `env.add_browser`:
    it holds Xvfb and xkbcomp (and `/bin/sh`, which Xvfb runs xkbcomp with), the X
    libraries proctor loads with ctypes, Pillow, tkinter with Tcl/Tk, fonts and
    fontconfig, and chromium (`chromium` on `PATH`): ~570 MB (chromium is 300 MB of
    it), 15-30 s to build; docs/computer.md lists what and why.

    Args:
        engine: "podman" or "docker"; default: whichever is installed (podman first).
        distributions: installed distributions to include, with their requirements
            (extras not included; list them by name).
        paths: more files or folders of this machine to include at the same path,
            for example the folder of an environment source.
        repository: image name; the tag is the content hash. Default:
            `localhost/proctor-python`, or `localhost/proctor-computer` with `computer`.
        computer: include what desktops and browsers need (from this machine:
            `make sysdeps` installs it).

    Returns:
        The image reference, `repository:hash`.

    Raises:
        RuntimeLaunchError: no engine, or the engine refused the import.
        ValueError: a distribution is not installed, a path does not exist, or (with
            `computer`) a program or library is missing here.
    """
    exe = resolve_engine(engine)
    files = _Files()
    files.add_python(tk=computer)
    for name in _closure([*distributions, *(DISTRIBUTIONS if computer else ())]):
        files.add_distribution(name)
    if computer:
        files.add_computer()
    for extra in paths:
        if not os.path.lexists(extra):
            raise ValueError(f"python_image: {extra} does not exist")
        files.add_tree(os.path.abspath(extra), skip_anywhere=_CACHES)
    files.add_libraries()
    changes = [
        f"ENV PATH={os.path.dirname(sys.executable)}:/usr/local/bin:/usr/bin:/bin",
        "ENV PYTHONDONTWRITEBYTECODE=1",
        "WORKDIR /",
    ]
    repository = repository or (COMPUTER_REPOSITORY if computer else DEFAULT_REPOSITORY)
    ref = f"{repository}:{files.digest(changes)[:16]}"
    if not _exists(exe, ref):
        _import(exe, ref, files, changes)
        _prune(exe, repository, keep=_KEEP)
    return ref


def _closure(names: Sequence[str]) -> list[str]:
    """The distributions named and everything they require (installed ones, no extras)."""
    seen: dict[str, str] = {}
    todo = list(names)
    while todo:
        name = todo.pop()
        key = re.sub(r"[-_.]+", "-", name).lower()
        if key in seen:
            continue
        try:
            requires = metadata.requires(name) or []
        except metadata.PackageNotFoundError:
            if name in names:
                raise ValueError(f"python_image: distribution {name!r} is not installed") from None
            continue  # a requirement whose marker does not apply here
        seen[key] = name
        for req in requires:
            if "extra ==" not in req.partition(";")[2]:
                todo.append(re.split(r"[\s;<>=!~\[(]", req, maxsplit=1)[0])
    return sorted(seen.values())


class _Files:
    """The paths that go into the image: every symlink on the way, then the file."""

    def __init__(self) -> None:
        self.entries: set[str] = set()  # absolute paths
        self.elves: list[str] = []  # shared objects whose libraries we need
        self.links: dict[str, str] = {}  # symlinks made in the image: name -> target

    def add(self, path: str, depth: int = 0) -> None:
        """Add `path`, following symlinks in any component (kept as symlinks)."""
        if depth > 40:
            raise ValueError(f"python_image: too many symlinks resolving {path}")
        parts = Path(path).parts
        current = "/"
        for i, part in enumerate(parts[1:], 1):
            current = os.path.join(current, part)
            if os.path.islink(current):
                self._parents(current)
                self.entries.add(current)
                target = os.path.join(os.path.dirname(current), os.readlink(current))
                self.add(os.path.normpath(os.path.join(target, *parts[i + 1 :])), depth + 1)
                return
        if os.path.exists(current):
            self._parents(current)
            self.entries.add(current)
            if current.endswith(".so") or ".so." in current:
                self.elves.append(current)

    def _parents(self, path: str) -> None:
        parent = os.path.dirname(path)
        while parent != "/" and parent not in self.entries:
            self.entries.add(parent)
            parent = os.path.dirname(parent)

    def add_tree(
        self,
        root: str,
        skip: frozenset[str] = frozenset(),
        skip_anywhere: frozenset[str] = frozenset(),
    ) -> None:
        """Add a file, or a folder and what it holds but `skip` (at its top) and `-O` bytecode."""
        self.add(root)
        real = os.path.realpath(root)
        if not os.path.isdir(real):
            return
        for dirpath, dirnames, filenames in os.walk(real):
            dirnames[:] = sorted(d for d in dirnames if d not in (skip if dirpath == real else ()))
            dirnames[:] = [d for d in dirnames if d not in skip_anywhere]
            for name in dirnames:
                self.add(os.path.join(dirpath, name))
            for name in sorted(filenames):
                if not _SKIP_FILE.search(name):
                    self.add(os.path.join(dirpath, name))

    def add_python(self, tk: bool = False) -> None:
        """The interpreter (through its symlinks), its venv config and its stdlib
        (with `tk`, tkinter and `_tkinter` too)."""
        self.add(sys.executable)
        self.elves.append(os.path.realpath(sys.executable))
        cfg = os.path.join(sys.prefix, "pyvenv.cfg")
        if os.path.exists(cfg):
            self.add(cfg)
        stdlib = sysconfig.get_paths()["stdlib"]
        config = os.path.basename(sysconfig.get_config_var("LIBPL") or "config")
        skip = _STDLIB_SKIP - _TK if tk else _STDLIB_SKIP
        self.add_tree(stdlib, skip | {config, "lib-dynload"}, _SKIP_DIRS)
        dynload = os.path.join(stdlib, "lib-dynload")
        self.add(dynload)
        for name in sorted(os.listdir(dynload)):
            if not _DYNLOAD_SKIP.match(name) or (tk and name.startswith("_tkinter.")):
                self.add(os.path.join(dynload, name))

    def add_computer(self) -> None:
        """What desktops and browsers need (`_image_computer`), with `chromium` on `PATH`."""
        found = computer_files()
        for path in found.elves:
            self.add(path)
            self.elves.append(os.path.realpath(path))
        for path in found.paths:
            self.add_tree(path)
        self.add_tree(CHROMIUM, skip=CHROMIUM_SKIP)
        self.links.update(LINKS)

    def add_distribution(self, name: str) -> None:
        """A distribution's recorded files; an editable install's source folders too."""
        dist = metadata.distribution(name)
        for file in dist.files or []:
            path = os.path.normpath(str(dist.locate_file(file)))
            self.add(path)
            if path.endswith(".pth") and os.path.isfile(path):
                for line in Path(path).read_text().splitlines():
                    if line and not line.startswith(("#", "import")) and os.path.isdir(line):
                        self.add_tree(line, skip_anywhere=_CACHES)

    def add_libraries(self) -> None:
        """The shared libraries every included shared object links to, per `ldd`."""
        if not self.elves:
            return
        found = subprocess.run(
            ["ldd", *self.elves], capture_output=True, text=True, check=False
        ).stdout
        for lib in sorted(set(re.findall(r"(?:=> |^\s+)(/\S+) \(0x", found, re.MULTILINE))):
            self.add(os.path.normpath(lib))  # an $ORIGIN/../ rpath leaves `..` in

    def members(
        self, compiled: bool = False
    ) -> Iterator[tuple[tarfile.TarInfo, bytes | str | None]]:
        """Tar headers in a stable order, each with its content: bytes or a file to read.

        With `compiled`, a `.py` file without current bytecode beside it gets some, so
        the container does not compile it at every start.
        """
        dirs = {"tmp": 0o1777, "proc": 0o555, "sys": 0o555, "dev": 0o755, "etc": 0o755}
        for name, mode in dirs.items():
            info = tarfile.TarInfo(name)
            info.type, info.mode = tarfile.DIRTYPE, mode
            yield info, None
        for name, data in _ETC.items():
            info = tarfile.TarInfo(name)
            info.size, info.mode = len(data), 0o644
            yield info, data
        bytecode = self.bytecode() if compiled else {}
        made_dirs = {os.path.dirname(p) for p in bytecode} - self.entries
        fixed = {*dirs, *_ETC, *self.links}  # a project below /tmp must not add /tmp twice
        for path in sorted({*self.entries, *bytecode, *made_dirs}):
            if path.lstrip("/") in fixed:
                continue
            info = tarfile.TarInfo(path.lstrip("/"))
            if path in bytecode:
                info.size, info.mode = len(bytecode[path]), 0o644
                yield info, bytecode[path]
                continue
            if path in made_dirs:
                info.type, info.mode = tarfile.DIRTYPE, 0o755
                yield info, None
                continue
            st = os.lstat(path)
            info.mode, info.mtime = stat.S_IMODE(st.st_mode), int(st.st_mtime)
            if stat.S_ISLNK(st.st_mode):
                info.type, info.linkname = tarfile.SYMTYPE, os.readlink(path)
                yield info, None
            elif stat.S_ISDIR(st.st_mode):
                info.type = tarfile.DIRTYPE
                yield info, None
            elif stat.S_ISREG(st.st_mode):
                info.size = st.st_size
                yield info, path
            # sockets, fifos and devices have no place in an image
        for name, target in sorted(self.links.items()):  # after their folders
            info = tarfile.TarInfo(name)
            info.type, info.linkname = tarfile.SYMTYPE, target
            yield info, None

    def bytecode(self) -> dict[str, bytes]:
        """Timestamp-checked bytecode (PEP 552) for each `.py` file lacking a current one."""
        out: dict[str, bytes] = {}
        for path in self.entries:
            if not path.endswith(".py") or os.path.islink(path):
                continue
            st = os.stat(path)
            header = MAGIC_NUMBER + struct.pack(
                "<III", 0, int(st.st_mtime) & 0xFFFFFFFF, st.st_size & 0xFFFFFFFF
            )
            cached = cache_from_source(path)
            if cached in self.entries:
                with open(cached, "rb") as f:
                    if f.read(16) == header:
                        continue
            try:
                code = compile(Path(path).read_bytes(), path, "exec", dont_inherit=True)
            except (SyntaxError, ValueError):
                continue  # not importable anyway
            out[cached] = header + marshal.dumps(code)
        return out

    def digest(self, changes: list[str]) -> str:
        """A hash of every header and content, and of the image settings."""
        h = hashlib.sha256(_FORMAT)
        for line in changes:
            h.update(line.encode() + b"\0")
        for info, content in self.members():
            h.update(f"{info.name}\0{info.type!r}\0{info.mode}\0{info.linkname}\0".encode())
            if isinstance(content, bytes):
                h.update(content)
            elif content is not None:
                with open(content, "rb") as f:
                    h.update(hashlib.file_digest(f, "sha256").digest())
        return h.hexdigest()

    def write(self, out: IO[bytes]) -> None:
        """Stream the tar archive to `out`."""
        with tarfile.open(fileobj=out, mode="w|", format=tarfile.PAX_FORMAT) as tar:
            self.add_to(tar)

    def add_to(self, tar: tarfile.TarFile, skip: Callable[[str], bool] | None = None) -> None:
        """Add every member to `tar`, but those whose name `skip` picks."""
        for info, content in self.members(compiled=True):
            if skip is not None and skip(info.name):
                continue
            if isinstance(content, bytes):
                tar.addfile(info, io.BytesIO(content))
            elif content is None:
                tar.addfile(info)
            else:
                with open(content, "rb") as f:
                    tar.addfile(info, f)


def _exists(exe: list[str], ref: str) -> bool:
    argv = [*exe, "image", "inspect", "--format", "{{.Id}}", ref]
    return subprocess.run(argv, capture_output=True, check=False).returncode == 0


def _prune(exe: list[str], repository: str, keep: int) -> None:
    """Remove all but the `keep` newest images of `repository` (those in use stay)."""
    argv = [*exe, "images", "--format", "{{.Repository}}:{{.Tag}}", "--filter"]
    listed = subprocess.run(
        [*argv, f"reference={repository}"], capture_output=True, text=True, check=False
    ).stdout.split()
    if len(listed) > keep:
        subprocess.run([*exe, "rmi", *listed[keep:]], capture_output=True, check=False)


def _import(exe: list[str], ref: str, files: _Files, changes: list[str]) -> None:
    argv = [*exe, "import", *(f"--change={c}" for c in changes), "-", ref]
    with tempfile.TemporaryFile() as err:
        proc = subprocess.Popen(argv, stdin=subprocess.PIPE, stdout=subprocess.DEVNULL, stderr=err)
        assert proc.stdin is not None
        try:
            with proc.stdin:
                files.write(proc.stdin)
        except BrokenPipeError:
            pass  # the engine gave up early; its stderr says why
        if proc.wait() != 0:
            err.seek(0)
            why = err.read().decode(errors="replace").strip()
            raise RuntimeLaunchError(f"{' '.join(argv[:2])} {ref}: exit {proc.returncode}: {why}")
