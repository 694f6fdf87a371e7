"""What `python_image(computer=True)` adds so a desktop and a browser run in the image.

Found by running Xvfb, a Tk app and chromium inside the image and reading their errors:
- the desktop: `Xvfb` and `xkbcomp` (which Xvfb runs through `/bin/sh -c`, so the image
  gets this machine's `/bin/sh`), the X data (`/usr/share/X11`: the XKB rules and
  keymaps, libX11's locale tables), the libraries `proctor.env` loads with ctypes
  (libX11, libXtst, libXext: `ldd` of the interpreter does not name them) and Pillow,
  which encodes the frames;
- apps in the desktop: tkinter with Tcl/Tk and their script libraries, fonts with
  fontconfig's configuration and cache;
- the browser: chromium's folder (the binary, its `.pak`/`.dat`/`.bin` data, locales,
  SwiftShader) with the `chromium` on `PATH` linked to the binary itself (Debian's
  `/usr/bin/chromium` is a shell script reading `/etc/chromium.d`).
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sysconfig

__all__ = ["DISTRIBUTIONS", "LINKS", "ComputerFiles", "computer_files"]

DISTRIBUTIONS = ("pillow",)
_PROGRAMS = ("Xvfb", "xkbcomp")
_CTYPES_LIBS = ("libX11.so.6", "libXtst.so.6", "libXext.so.6")
_DATA = (
    "/bin/sh",
    "/usr/share/X11",
    "/etc/fonts",
    "/usr/share/fontconfig",
    "/usr/share/fonts",
    "/var/cache/fontconfig",
    "/usr/share/tcltk",
)
CHROMIUM = "/usr/lib/chromium"
# In chromium's folder, only for debugging Vulkan (23 MB).
CHROMIUM_SKIP = frozenset(
    {"libVkLayer_khronos_validation.so", "libVkLayer_khronos_validation.so.TOC"}
)
LINKS = {"usr/bin/chromium": f"{CHROMIUM}/chromium"}  # image path -> link target
_DEPS = "install them with `make sysdeps`"


class ComputerFiles:
    """Paths of this machine for a computer-use image: `elves` get their `ldd` closure."""

    def __init__(self, elves: list[str], paths: list[str]) -> None:
        self.elves = elves  # executables and libraries whose shared libraries go in too
        self.paths = paths  # files and folders, included whole


def computer_files() -> ComputerFiles:
    """The programs, libraries and data a desktop and a browser need, found here.

    Raises:
        ValueError: one is missing on this machine (naming it).
    """
    missing: list[str] = []
    elves: list[str] = []
    for name in _PROGRAMS:
        path = shutil.which(name)
        if path is None:
            missing.append(name)
        else:
            elves.append(path)
    libs = _libraries()
    for soname in _CTYPES_LIBS:
        if soname in libs:
            elves.append(libs[soname])
        else:
            missing.append(soname)
    chromium = os.path.join(CHROMIUM, "chromium")
    if os.path.isfile(chromium):
        elves.append(chromium)
    else:
        missing.append(chromium)
    paths = [p for p in _DATA if os.path.exists(p)]
    missing += [p for p in _DATA if p not in paths]
    if missing:
        raise ValueError(
            f"python_image(computer=True): missing on this machine: {', '.join(missing)}; {_DEPS}"
        )
    return ComputerFiles(elves, paths)


def _libraries() -> dict[str, str]:
    """The dynamic linker's cache: soname -> path (this machine's architecture first).
    By path, as ctypes does: /sbin is not on every user's PATH."""
    try:
        listed = subprocess.run(
            ["/sbin/ldconfig", "-p"], capture_output=True, text=True, check=False
        ).stdout
    except OSError:
        return {}
    arch = sysconfig.get_config_var("MULTIARCH") or ""
    found: dict[str, str] = {}
    for soname, _, path in re.findall(r"^\s+(\S+) \(([^)]*)\) => (\S+)$", listed, re.MULTILINE):
        if soname not in found or (arch and f"/{arch}/" in path):
            found[soname] = path
    return found
