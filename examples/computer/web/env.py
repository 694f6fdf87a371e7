"""The `web` environment: a local order page in a headless chromium, graded from the
order the page sent.

Each rollout gets a browser (Debian's chromium, 640x400) and a small HTTP server on
loopback that serves the files of `page/` and takes the page's `POST /order`. The task
asks for a name and a size, then Order; the grade reads the order the server kept: one
subscore per field, the reward their mean. The browser is a `cdp` capability, so a
computer-use agent (frames and clicks) or Playwright over CDP can solve it.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import mimetypes
from collections.abc import AsyncGenerator
from pathlib import Path
from typing import Any

from proctor import Environment, Grade

__all__ = ["PAGE", "order", "web"]

PAGE = Path(__file__).with_name("page")
"""The page's files: `index.html` and what it loads."""

web = Environment("web")
browser = web.add_browser(width=640, height=400)


def _reply(writer: asyncio.StreamWriter, status: str, body: bytes, kind: str) -> None:
    writer.write(
        f"HTTP/1.1 {status}\r\nContent-Type: {kind}\r\nContent-Length: {len(body)}\r\n"
        "Connection: close\r\n\r\n".encode()
        + body
    )


def _file(target: str) -> Path | None:
    """The file of `page/` a GET asks for (`/` is `index.html`), None outside it."""
    name = target.split("?", 1)[0].lstrip("/") or "index.html"
    path = (PAGE / name).resolve()
    return path if path.parent == PAGE.resolve() and path.is_file() else None


async def _serve(orders: list[dict[str, Any]], arrived: asyncio.Event) -> asyncio.Server:
    """An HTTP/1.1 server on a free loopback port: GET the page's files, POST /order."""

    async def handle(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            head = (await reader.readuntil(b"\r\n\r\n")).decode("latin-1").split("\r\n")
            method, target, _ = head[0].split(" ", 2)
            length = next(
                (int(h.split(":", 1)[1]) for h in head if h.lower().startswith("content-length:")),
                0,
            )
            body = await reader.readexactly(length) if length else b""
            path = _file(target)
            if method == "POST" and target == "/order":
                orders.append(json.loads(body))
                arrived.set()
                _reply(writer, "200 OK", b"{}", "application/json")
            elif method == "GET" and path is not None:
                kind = mimetypes.guess_type(path.name)[0] or "application/octet-stream"
                _reply(writer, "200 OK", path.read_bytes(), kind)
            else:
                _reply(writer, "404 Not Found", b"not found", "text/plain")
            await writer.drain()
        except (OSError, ValueError, asyncio.IncompleteReadError):
            pass
        finally:
            writer.close()

    return await asyncio.start_server(handle, "127.0.0.1", 0)


async def _last_order(
    orders: list[dict[str, Any]], arrived: asyncio.Event, within: float
) -> dict[str, Any]:
    """The newest order, waiting up to `within` seconds for one still on its way."""
    with contextlib.suppress(TimeoutError):
        await asyncio.wait_for(arrived.wait(), within)
    return orders[-1] if orders else {}


@web.template
async def order(name: str, size: str) -> AsyncGenerator[Any, Any]:
    """Order a pizza on the page."""
    orders: list[dict[str, Any]] = []
    arrived = asyncio.Event()
    server = await _serve(orders, arrived)
    try:
        port = server.sockets[0].getsockname()[1]
        await browser.goto(f"http://127.0.0.1:{port}/")
        yield (
            f'On the page, order a {size} pizza for the name "{name}": '
            "fill in the form and press Order."
        )
        placed = await _last_order(orders, arrived, within=5.0)
        scores = {
            key: float(placed.get(key) == value) for key, value in (("name", name), ("size", size))
        }
        yield Grade(  # the reward: the mean of the subscores
            subscores=[{"name": key, "value": value} for key, value in scores.items()],
            info={"order": placed, "orders": len(orders)},
        )
    finally:
        server.close()
