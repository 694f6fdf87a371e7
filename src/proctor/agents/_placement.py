"""A `CommandAgent` harness placed inside its rollout's substrate (`placement="substrate"`).

The runtime says how to start a process in the rollout's sandbox or container (its
`SubstrateEntry`: `podman exec -i`, or `nsenter` into the sandbox's namespaces as its
user). The driver starts `_placement_init` there and speaks a small framed protocol with
it over that process's stdin and stdout (the module doc of `_placement_init`): the
harness's setup goes in, its output and exit status come out, and every connection the
harness opens to its model endpoint (a loopback port inside the substrate) is carried
over the same pipes to the driver, which dials the run's interception-proxy session.
So the harness reaches the proxy, and only the proxy, with the session's per-rollout
secret; no provider key and no route out enters the substrate, and no listener is
opened on the host.
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
import functools
import json
import os
import signal
import struct
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any, Protocol
from urllib.parse import urlsplit

from .._errors import RolloutError
from .._urls import host_port

__all__ = ["Entry", "Placed", "run_placed"]

_BOOT = "import sys;exec(compile(sys.stdin.buffer.read(int(sys.argv[1])),'proctor-placed','exec'))"
SETUP, DATA, EOF, CLOSE, OPEN, OUT, EXIT = range(1, 8)
_ANSWERED = 0  # in a connection's inbox only: the proxy's side ended
_HEADER = struct.Struct(">BII")
_MAX_FRAME = 1 << 20  # the init sends at most 64 KiB a frame
_MAX_CONNS = 256
_TAIL = 1 << 16


class Entry(Protocol):
    """What a harness placement needs of the runtime's `SubstrateEntry`."""

    @property
    def kind(self) -> str: ...
    @property
    def python(self) -> str: ...
    @property
    def workdir(self) -> str | None: ...
    @property
    def environ(self) -> Mapping[str, str]: ...
    @property
    def limits(self) -> Mapping[str, Any]: ...
    def command(self, argv: Sequence[str]) -> list[str]: ...


class Placed:
    """One start of a harness inside a substrate: its setup, then the relay.

    `urls` maps a URL variable (`OPENAI_BASE_URL`, ...) to the driver-side URL it
    names (the proxy session's): inside, it points at a loopback port whose
    connections the driver joins to that URL's host and port.
    """

    def __init__(
        self,
        argv: Sequence[str | Path],
        env: Mapping[str, str],
        urls: Mapping[str, str],
        *,
        cwd: str | None,
        stdin: bytes,
        grace: float,
    ) -> None:
        self.targets: list[tuple[str, int]] = []
        self.urls: dict[str, tuple[int, str]] = {}
        for var, url in urls.items():
            target = host_port(url)
            if target not in self.targets:
                self.targets.append(target)
            self.urls[var] = (self.targets.index(target), urlsplit(url).path)
        self.files: dict[str, str] = {}
        self.argv: list[Any] = []
        for arg in argv:
            if isinstance(arg, Path):  # shipped into the substrate
                self.files[arg.name] = base64.b64encode(arg.read_bytes()).decode()
                self.argv.append({"ship": arg.name})
            elif arg == "{python}":
                self.argv.append({"python": True})
            else:
                self.argv.append(arg)
        self.env = dict(env)
        self.cwd = cwd
        self.stdin = stdin
        self.grace = grace

    def setup(self, entry: Entry) -> bytes:
        """The SETUP frame's payload (it holds the session's secret: it goes by pipe)."""
        setup = {
            "argv": self.argv,
            "env": self.env,
            "cwd": self.cwd or entry.workdir,
            "files": self.files,
            "stdin": base64.b64encode(self.stdin).decode(),
            "listen": len(self.targets),
            "urls": self.urls,
            "limits": dict(entry.limits),
            "grace": self.grace,
        }
        return json.dumps(setup).encode()


async def run_placed(entry: Entry, placed: Placed) -> tuple[int | None, bytes, bytes]:
    """Run `placed` inside the substrate `entry` leads into: (exit status, stdout, stderr).

    The status is None when the harness never ran (the entry command failed: its
    stderr says why). Cancelled, it closes the init's stdin (the harness gets SIGTERM,
    SIGKILL after its grace) and kills the entry command after the grace.

    Raises:
        RolloutError: the entry command cannot be started.
    """
    code = _init_source()
    argv = entry.command([entry.python, "-I", "-S", "-c", _BOOT, str(len(code))])
    try:
        proc = await asyncio.create_subprocess_exec(
            *argv,
            stdin=asyncio.subprocess.PIPE,
            stdout=asyncio.subprocess.PIPE,
            stderr=asyncio.subprocess.PIPE,
            env=dict(entry.environ),
            start_new_session=True,
        )
    except OSError as exc:
        raise RolloutError(f"cannot enter the {entry.kind}: {argv[0]}: {exc}") from None
    relay = _Relay(proc, placed.targets)
    assert proc.stdin is not None
    proc.stdin.write(code + _frame(SETUP, 0, placed.setup(entry)))
    errors = asyncio.ensure_future(_tail(proc))
    try:
        await relay.serve()
        err = await errors
        await proc.wait()
    except BaseException:
        errors.cancel()
        await _stop(proc, placed.grace)
        relay.close()
        raise
    relay.close()
    return relay.code, bytes(relay.out), err


class _Relay:
    """The driver's end of the init's frames: output, exit status, proxied connections."""

    def __init__(self, proc: asyncio.subprocess.Process, targets: list[tuple[str, int]]) -> None:
        self.proc = proc
        self.targets = targets
        self.out = bytearray()
        self.code: int | None = None
        self.conns: dict[int, asyncio.Queue[tuple[int, bytes]]] = {}
        self.tasks: set[asyncio.Task[None]] = set()

    async def serve(self) -> None:
        """Read frames until the init's stdout ends."""
        stdout = self.proc.stdout
        assert stdout is not None
        while True:
            try:
                kind, cid, size = _HEADER.unpack(await stdout.readexactly(_HEADER.size))
                if size > _MAX_FRAME:
                    raise RolloutError(f"the harness's init sent a frame of {size} bytes")
                data = await stdout.readexactly(size) if size else b""
            except asyncio.IncompleteReadError:
                return
            if kind == OUT:
                self.out += data
            elif kind == EXIT:
                self.code = int(data)
            elif kind == OPEN:
                self._open(cid, int(data))
            elif cid in self.conns:
                self.conns[cid].put_nowait((kind, data))

    def _open(self, cid: int, index: int) -> None:
        if len(self.conns) >= _MAX_CONNS or not 0 <= index < len(self.targets):
            self._send(CLOSE, cid)
            return
        inbox: asyncio.Queue[tuple[int, bytes]] = asyncio.Queue()
        self.conns[cid] = inbox
        task = asyncio.ensure_future(self._connection(cid, self.targets[index], inbox))
        self.tasks.add(task)
        task.add_done_callback(self.tasks.discard)

    async def _connection(
        self, cid: int, target: tuple[str, int], inbox: asyncio.Queue[tuple[int, bytes]]
    ) -> None:
        """Join connection `cid` to `target`: its frames there, the answers back."""
        writer: asyncio.StreamWriter | None = None
        back: asyncio.Task[None] | None = None
        ended: set[int] = set()  # EOF (from the harness), _ANSWERED (from the proxy)
        try:
            reader, writer = await asyncio.open_connection(*target)
            back = asyncio.ensure_future(self._back(cid, reader, inbox))
            while True:
                kind, data = await inbox.get()
                if kind == DATA:
                    writer.write(data)
                    await writer.drain()
                elif kind == CLOSE:
                    break
                elif kind in (EOF, _ANSWERED):
                    if kind == EOF and writer.can_write_eof():
                        writer.write_eof()
                    ended.add(kind)
                    if len(ended) == 2:  # both ways done: the init lets go of it too
                        self._send(CLOSE, cid)
                        break
        except OSError:
            self._send(CLOSE, cid)
        finally:
            self.conns.pop(cid, None)
            if back is not None:
                back.cancel()
            if writer is not None:
                writer.close()

    async def _back(
        self, cid: int, reader: asyncio.StreamReader, inbox: asyncio.Queue[tuple[int, bytes]]
    ) -> None:
        """The proxy's bytes to the init; its end as EOF there and `_ANSWERED` here."""
        try:
            while data := await reader.read(1 << 16):
                self._send(DATA, cid, data)
                await self._drain()
            self._send(EOF, cid)
            inbox.put_nowait((_ANSWERED, b""))
        except OSError:
            self._send(CLOSE, cid)
            inbox.put_nowait((CLOSE, b""))

    def _send(self, kind: int, cid: int, data: bytes = b"") -> None:
        stdin = self.proc.stdin
        if stdin is not None and not stdin.is_closing():
            stdin.write(_frame(kind, cid, data))

    async def _drain(self) -> None:
        stdin = self.proc.stdin
        if stdin is not None and not stdin.is_closing():
            with contextlib.suppress(ConnectionError):
                await stdin.drain()

    def close(self) -> None:
        for task in self.tasks:
            task.cancel()
        stdin = self.proc.stdin
        if stdin is not None:
            stdin.close()


def _frame(kind: int, cid: int, data: bytes) -> bytes:
    return _HEADER.pack(kind, cid, len(data)) + data


async def _tail(proc: asyncio.subprocess.Process) -> bytes:
    """The entry command's stderr (the harness's), its last `_TAIL` bytes."""
    assert proc.stderr is not None
    kept = bytearray()
    while data := await proc.stderr.read(1 << 16):
        kept += data
        del kept[:-_TAIL]
    return bytes(kept)


async def _stop(proc: asyncio.subprocess.Process, grace: float) -> None:
    """End of stdin first (the init stops the harness), then SIGKILL to the entry command."""
    if proc.stdin is not None:
        proc.stdin.close()
    with contextlib.suppress(TimeoutError):
        await asyncio.wait_for(asyncio.shield(proc.wait()), grace + 1.0)
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(proc.pid, signal.SIGKILL)
    await proc.wait()


@functools.cache
def _init_source() -> bytes:
    return Path(__file__).with_name("_placement_init.py").read_bytes()
