"""Agents that wait in their phase, so a test can kill the runner mid-rollout."""

from __future__ import annotations

import asyncio
import re
from typing import Any


async def waiter(run: Any) -> None:
    await asyncio.sleep(600)


class Patient:
    """Works out the inventory answer, checkpoints it and waits to be killed; continued
    from its checkpoint by a resumed runner, it answers at once."""

    async def __call__(self, run: Any) -> None:
        if run.restored is not None:
            run.answer = run.restored["answer"]
            return
        found = re.search(r"holds (\d+) of '[^']*'\. A delivery of (\d+) arrived", str(run.prompt))
        answer = str(int(found[1]) + int(found[2])) if found else "?"
        run.save_checkpoint({"answer": answer})
        await asyncio.sleep(600)  # the test kills the runner meanwhile
        run.answer = "too late"
