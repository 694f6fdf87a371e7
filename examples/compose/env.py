"""The `inventory` environment: an app whose stock lives in a database service.

It runs in the `main` service of `compose.yaml` and reaches the `db` service by name
(`$STOCK_DB`, http://db:8080). Each task puts a stock count into the database, asks
the agent for the count after a delivery, books the agent's answer into the
database, and grades what the database then holds.
"""

from __future__ import annotations

import asyncio
import os
import urllib.error
import urllib.request
from collections.abc import AsyncGenerator

from proctor import Environment

inventory = Environment("inventory")


def _call(method: str, item: str, body: str | None = None) -> str:
    url = f"{os.environ['STOCK_DB']}/stock/{item}"
    data = None if body is None else body.encode()
    request = urllib.request.Request(url, data=data, method=method)
    with urllib.request.urlopen(request, timeout=10) as response:
        answer: bytes = response.read()
        return answer.decode()


async def db(method: str, item: str, body: str | None = None) -> str:
    """One request to the database service."""
    return await asyncio.to_thread(_call, method, item, body)


@inventory.template
async def restock(item: str, stock: int, delivered: int) -> AsyncGenerator[str | float, str]:
    """Book a delivery: the answer becomes the item's new stock in the database."""
    await db("PUT", item, str(stock))
    current = await db("GET", item)
    answer = yield (
        f"The database holds {current} of '{item}'. A delivery of {delivered} arrived. "
        "What is the new stock? Answer with a number."
    )
    try:
        await db("PUT", item, str(int(answer.strip())))
    except (ValueError, urllib.error.HTTPError):
        yield 0.0
        return
    booked = int(await db("GET", item))
    yield 1.0 if booked == stock + delivered else 0.0
