"""An agent that waits in its phase, so a test can kill the runner mid-rollout."""

from __future__ import annotations

import asyncio
from typing import Any


async def waiter(run: Any) -> None:
    await asyncio.sleep(600)
