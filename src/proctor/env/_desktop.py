"""The `desktop` capability: an X display (Xvfb) per environment server, with an action server.

`DesktopServer.start()` launches `Xvfb` on a free display number (`-displayfd`, no TCP,
an MIT cookie in a private 0700 folder), opens one Xlib connection driven from its own
thread (XTEST for input, `XGetImage` for frames) and serves protocol computer/1
(`_computer_server`) on a Unix socket in that folder. Apps are started in the display
with `launch()`. Every process it starts gets the parent-death signal and its own
process group; `aclose()` kills them all and removes the folder.
"""

from __future__ import annotations

import asyncio
import contextlib
import ctypes
import os
import secrets
import signal
import struct
import sys
import time
from collections.abc import Callable, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import BinaryIO

from .._environ import allowed_environ
from ._capability_server import CapabilityServer
from ._computer_actions import Action, FrameOptions
from ._computer_server import serve_computer
from ._frames import encode_bgrx
from ._x11 import XDisplay, char_keysym, keysym

__all__ = ["DesktopServer", "die_with_parent"]

_PR_SET_PDEATHSIG = 1
START_TIMEOUT = 15.0

KEY_ALIASES = {
    "ctrl": "Control_L", "control": "Control_L", "alt": "Alt_L", "shift": "Shift_L",
    "super": "Super_L", "cmd": "Super_L", "meta": "Super_L", "win": "Super_L",
    "enter": "Return", "return": "Return", "esc": "Escape", "escape": "Escape",
    "backspace": "BackSpace", "tab": "Tab", "delete": "Delete", "del": "Delete",
    "space": "space", "up": "Up", "down": "Down", "left": "Left", "right": "Right",
    "pageup": "Prior", "pagedown": "Next", "page_up": "Prior", "page_down": "Next",
    "home": "Home", "end": "End", "insert": "Insert",
}  # fmt: skip
"""Lower-case names agents use, mapped to X keysym names (xdotool's vocabulary)."""


def die_with_parent() -> Callable[[], None] | None:
    """A `preexec_fn` giving the child SIGKILL when the thread that started it dies."""
    if sys.platform != "linux":
        return None
    prctl = ctypes.CDLL(None, use_errno=True).prctl  # resolved before the fork
    parent = os.getpid()

    def preexec() -> None:
        prctl(_PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0)
        if os.getppid() != parent:  # the parent died before the signal was armed
            os.kill(os.getpid(), signal.SIGKILL)

    return preexec


def x_keysym(name: str) -> int:
    """The keysym for a key name (alias, X keysym name or one character), 0 if unknown."""
    alias = KEY_ALIASES.get(name.lower())
    if alias is not None:
        return keysym(alias)
    if len(name) > 1 and name[0] in "fF" and name[1:].isdigit() and 1 <= int(name[1:]) <= 24:
        return keysym(f"F{int(name[1:])}")
    found = keysym(name)
    if found or len(name) != 1:
        return found
    return char_keysym(name)


class DesktopServer(CapabilityServer):
    """An X display of `width` x `height` with a computer/1 action server.

    Args:
        width: screen width in pixels.
        height: screen height in pixels.
        window_manager: a command started in the display once it is up (e.g.
            `["openbox"]`); None runs none (focus then follows clicks in most toolkits).
        live_view: allow `subscribe` (a read-only stream of frames) on the socket.
        xvfb: the Xvfb binary.

    Its action socket is `url`: `unix:///<private folder>/desktop.sock`.
    """

    kind = "desktop"

    def __init__(
        self,
        width: int = 1280,
        height: int = 800,
        *,
        window_manager: Sequence[str] | None = None,
        live_view: bool = False,
        xvfb: str = "Xvfb",
    ) -> None:
        if not (16 <= width <= 8192 and 16 <= height <= 8192):
            raise ValueError(f"desktop size {width}x{height} is outside 16..8192")
        super().__init__()
        self.width = width
        self.height = height
        self.window_manager = list(window_manager) if window_manager else None
        self.live_view = live_view
        self.xvfb = xvfb
        self.lock = asyncio.Lock()
        self.display: str | None = None
        self._cookie = secrets.token_bytes(16)
        self._procs: list[asyncio.subprocess.Process] = []
        self._x: XDisplay | None = None
        self._thread = ThreadPoolExecutor(1)
        self._last: tuple[bytes, FrameOptions, tuple[bytes, int, int]] | None = None

    def __repr__(self) -> str:
        return f"<DesktopServer {self.display or 'stopped'} {self.width}x{self.height}>"

    @property
    def environ(self) -> dict[str, str]:
        """`DISPLAY` and `XAUTHORITY` for a client of this display (once started)."""
        if self.display is None or self._dir is None:
            raise RuntimeError("DesktopServer is not started")
        return {"DISPLAY": self.display, "XAUTHORITY": os.path.join(self._dir, "Xauthority")}

    async def start(self) -> str:
        """Start Xvfb, connect to it and serve the action socket; returns the URL.

        Raises:
            OSError: Xvfb is missing or did not come up, or the folder or socket could
                not be made.
        """
        self._make_dir()
        # One thread owns the Xlib connection; a restarted desktop gets a fresh one.
        self._thread = ThreadPoolExecutor(1, thread_name_prefix="proctor-x11")
        self._last = None
        try:
            await self._start_xvfb()
            loop = asyncio.get_running_loop()
            assert self.display is not None
            self._x = await loop.run_in_executor(self._thread, XDisplay, self.display, self._cookie)
            if self.window_manager:
                await self.launch(self.window_manager)
            await self._listen()
        except BaseException:
            await self.aclose()
            raise
        return self.url

    async def launch(
        self,
        argv: Sequence[str],
        *,
        env: Mapping[str, str] | None = None,
        cwd: str | Path | None = None,
    ) -> asyncio.subprocess.Process:
        """Start a program in this display, in its own process group, killed by `aclose`.

        It gets the allowlisted environment plus `DISPLAY`, `XAUTHORITY` and `env`.

        Raises:
            OSError: the program could not start.
        """
        proc = await asyncio.create_subprocess_exec(
            *argv,
            stdin=asyncio.subprocess.DEVNULL,
            stdout=asyncio.subprocess.DEVNULL,
            stderr=asyncio.subprocess.DEVNULL,
            env={**allowed_environ(), **self.environ, **(env or {})},
            cwd=cwd,
            start_new_session=True,
            preexec_fn=die_with_parent(),
        )
        self._procs.append(proc)
        return proc

    async def aclose(self) -> None:
        """Stop serving, close the X connection, kill every process started, remove the folder."""
        await self._stop_listening()
        x, self._x = self._x, None
        if x is not None:
            with contextlib.suppress(Exception):
                await asyncio.get_running_loop().run_in_executor(self._thread, x.close)
        self._thread.shutdown(wait=False)
        for proc in reversed(self._procs):
            await _stop(proc)
        self._procs.clear()
        self._remove_dir()
        self.display = None

    # -- the backend the action server drives ----------------------------------------------

    def known_key(self, name: str) -> bool:
        """Whether `name` names a key (xdotool's names, lower-case aliases, one character)."""
        return x_keysym(name) != 0

    async def perform(self, actions: list[Action]) -> None:
        """Run validated actions in order; waits sleep here, input runs on the X thread."""
        loop = asyncio.get_running_loop()
        run: list[Action] = []
        for action in [*actions, None]:
            if action is not None and action.type != "wait":
                run.append(action)
                continue
            if run:
                await loop.run_in_executor(self._thread, self._inject, run)
                run = []
            if action is not None:
                await asyncio.sleep(action.ms / 1000)

    async def frame(self, options: FrameOptions) -> tuple[bytes, int, int]:
        """Capture and encode the screen (both off the event loop)."""
        return await asyncio.get_running_loop().run_in_executor(
            self._thread, self._capture, options
        )

    async def cursor(self) -> tuple[int, int]:
        """The pointer position."""
        return await asyncio.get_running_loop().run_in_executor(self._thread, self._live().pointer)

    async def look(self) -> bytes:
        """The screen's raw pixels (no encoding), for `settle_ms`."""
        x, size = self._live(), (self.width, self.height)
        return await asyncio.get_running_loop().run_in_executor(self._thread, x.capture, *size)

    # -- X thread --------------------------------------------------------------------------

    def _live(self) -> XDisplay:
        if self._x is None:
            raise OSError("the desktop is stopped")
        return self._x

    def _capture(self, options: FrameOptions) -> tuple[bytes, int, int]:
        pixels = self._live().capture(self.width, self.height)
        # An unchanged screen (a wait, a click on nothing) costs a compare, not an encode.
        if self._last is not None and self._last[1] == options and self._last[0] == pixels:
            return self._last[2]
        frame = encode_bgrx(pixels, self.width, self.height, options)
        self._last = (pixels, options, frame)
        return frame

    def _inject(self, actions: list[Action]) -> None:
        x = self._live()
        for action in actions:
            _INJECT[action.type](x, action)
        x.sync()

    # -- internals -------------------------------------------------------------------------

    async def _connection(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await serve_computer(self, reader, writer)

    async def _start_xvfb(self) -> None:
        assert self._dir is not None
        auth = os.path.join(self._dir, "Xauthority")
        _write_private(auth, _xauth_entry(self._cookie))
        read_fd, write_fd = os.pipe()
        log_path = os.path.join(self._dir, "xvfb.log")
        try:
            with _open_log(log_path) as log:
                proc = await asyncio.create_subprocess_exec(
                    *[self.xvfb, "-displayfd", str(write_fd), "-screen", "0"],
                    f"{self.width}x{self.height}x24",
                    *["-nolisten", "tcp", "-auth", auth, "-noreset"],
                    stdin=asyncio.subprocess.DEVNULL,
                    stdout=asyncio.subprocess.DEVNULL,
                    stderr=log,
                    pass_fds=(write_fd,),
                    start_new_session=True,
                    preexec_fn=die_with_parent(),
                )
            self._procs.append(proc)
            os.close(write_fd)
            write_fd = -1
            number = await _read_display(read_fd, proc)
        finally:
            os.close(read_fd)
            if write_fd >= 0:
                os.close(write_fd)
        if number is None:
            raise OSError(f"Xvfb did not start: {_tail(log_path) or 'no output'}")
        self.display = f":{number}"


async def _read_display(fd: int, proc: asyncio.subprocess.Process) -> int | None:
    """The display number Xvfb writes on `fd` once it accepts clients; None if it died."""
    os.set_blocking(fd, False)
    data = b""
    deadline = time.monotonic() + START_TIMEOUT
    while time.monotonic() < deadline:
        with contextlib.suppress(BlockingIOError):
            chunk = os.read(fd, 64)
            if not chunk:
                break
            data += chunk
            if data.endswith(b"\n"):
                return int(data)
        if proc.returncode is not None:
            break
        await asyncio.sleep(0.01)
    return None


def _write_private(path: str, data: bytes) -> None:
    with open(os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600), "wb") as f:
        f.write(data)


def _open_log(path: str) -> BinaryIO:
    return open(path, "wb")


def _tail(path: str) -> str:
    lines = Path(path).read_text(errors="replace").strip().splitlines()
    return " | ".join(lines[-3:])


def _xauth_entry(cookie: bytes) -> bytes:
    """One Xauthority record matching any address and display (FamilyWild, empty number)."""

    def field(value: bytes) -> bytes:
        return struct.pack(">H", len(value)) + value

    return (
        struct.pack(">H", 0xFFFF)
        + field(b"")
        + field(b"")
        + field(b"MIT-MAGIC-COOKIE-1")
        + field(cookie)
    )


async def _stop(proc: asyncio.subprocess.Process) -> None:
    """Kill a started program's whole process group and reap it."""
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(proc.pid, signal.SIGKILL)
    with contextlib.suppress(TimeoutError):
        async with asyncio.timeout(5):
            await proc.wait()


def _click(x: XDisplay, a: Action) -> None:
    x.move(a.x, a.y)
    for _ in range(a.count):
        x.button(a.button, True)
        x.button(a.button, False)


def _drag(x: XDisplay, a: Action) -> None:
    x.move(*a.path[0])
    x.button(a.button, True)
    for point in a.path[1:]:
        x.move(*point)
    x.button(a.button, False)


def _scroll(x: XDisplay, a: Action) -> None:
    x.move(a.x, a.y)
    for amount, minus, plus in ((a.dy, 4, 5), (a.dx, 6, 7)):
        for _ in range(abs(amount)):
            x.button(plus if amount > 0 else minus, True)
            x.button(plus if amount > 0 else minus, False)


def _type(x: XDisplay, a: Action) -> None:
    x.type_text(a.text)


def _key(x: XDisplay, a: Action) -> None:
    syms = [x_keysym(k) for k in a.keys]
    for sym in syms:
        x.key(sym, True)
    for sym in reversed(syms):
        x.key(sym, False)


_INJECT: dict[str, Callable[[XDisplay, Action], None]] = {
    "click": _click,
    "move": lambda x, a: x.move(a.x, a.y),
    "drag": _drag,
    "scroll": _scroll,
    "type": _type,
    "key": _key,
}
