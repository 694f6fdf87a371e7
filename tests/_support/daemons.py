"""Stand-in capability daemons for the tests that forward or tunnel to one."""

from __future__ import annotations

import asyncio


async def echo_back(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
    """A stream handler that writes back whatever it reads, until the peer closes."""
    try:
        while data := await reader.read(65536):
            writer.write(data)
            await writer.drain()
    except ConnectionError:
        pass
    finally:
        writer.close()
