"""Helpers for the HTTP tests: a raw socket client that interprets nothing on our behalf."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Awaitable, Callable

from proctor._http import HttpServer

TIMEOUT = 5.0

Serve = Callable[..., Awaitable[HttpServer]]
"""The `serve` fixture: starts an `HttpServer` for a handler and options."""


class Raw:
    """A raw TCP connection: bytes out, responses parsed by this file's own tiny reader."""

    def __init__(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.reader = reader
        self.writer = writer

    @classmethod
    async def open(cls, port: int) -> Raw:
        reader, writer = await asyncio.open_connection("127.0.0.1", port)
        return cls(reader, writer)

    async def send(self, data: bytes) -> None:
        self.writer.write(data)
        await self.writer.drain()

    async def head(self) -> tuple[int, dict[str, str]]:
        raw = await asyncio.wait_for(self.reader.readuntil(b"\r\n\r\n"), TIMEOUT)
        lines = raw.decode("latin-1").split("\r\n")[:-2]
        status = int(lines[0].split(" ")[1])
        headers: dict[str, str] = {}
        for line in lines[1:]:
            name, _, value = line.partition(":")
            headers[name.lower()] = value.strip()
        return status, headers

    async def response(self, method: str = "GET") -> tuple[int, dict[str, str], bytes]:
        status, headers = await self.head()
        if method == "HEAD" or status in (204, 304):
            return status, headers, b""
        if headers.get("transfer-encoding") == "chunked":
            body = b""
            while True:
                size = int((await self._read(self.reader.readline())).strip(), 16)
                chunk = await self._read(self.reader.readexactly(size + 2))
                if size == 0:
                    return status, headers, body
                body += chunk[:-2]
        if "content-length" in headers:
            body = await self._read(self.reader.readexactly(int(headers["content-length"])))
            return status, headers, body
        return status, headers, await self._read(self.reader.read())

    async def _read(self, aw: object) -> bytes:
        return await asyncio.wait_for(aw, TIMEOUT)  # type: ignore[arg-type]

    async def at_eof(self) -> bool:
        """True when the server closed (or reset) without sending anything more."""
        try:
            rest = await asyncio.wait_for(self.reader.read(), TIMEOUT)
        except ConnectionResetError:
            return True
        return rest == b""

    async def close(self) -> None:
        self.writer.close()
        with contextlib.suppress(ConnectionError):
            await self.writer.wait_closed()


Dial = Callable[[HttpServer], Awaitable[Raw]]
"""The `dial` fixture: opens a raw connection to a server."""


class Scripted:
    """A raw TCP server running `script(reader, writer)` per connection; counts them."""

    def __init__(self, script: Script) -> None:
        self.script = script
        self.connections = 0
        self.server: asyncio.Server | None = None
        self._tasks: set[asyncio.Task[None]] = set()

    async def __aenter__(self) -> Scripted:
        self.server = await asyncio.start_server(self._serve, "127.0.0.1", 0)
        return self

    async def __aexit__(self, *exc: object) -> None:
        assert self.server is not None
        self.server.close()
        for task in self._tasks:
            task.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)
        await self.server.wait_closed()

    @property
    def url(self) -> str:
        assert self.server is not None
        return f"http://127.0.0.1:{self.server.sockets[0].getsockname()[1]}"

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.connections += 1
        task = asyncio.current_task()
        assert task is not None
        self._tasks.add(task)
        try:
            await self.script(reader, writer)
        finally:
            writer.close()
            self._tasks.discard(task)


Script = Callable[[asyncio.StreamReader, asyncio.StreamWriter], Awaitable[None]]
