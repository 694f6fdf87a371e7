"""An agent that checkpoints, then waits to be killed; continued from its checkpoint by
a resumed runner, it answers at once."""

from __future__ import annotations

import asyncio
import re
from typing import Any


class Patient:
    async def __call__(self, run: Any) -> None:
        if run.restored is not None:
            run.answer = f"done-{run.restored['n']}"
            return
        found = re.search(r"job (\d+)", str(run.prompt))
        run.save_checkpoint({"n": found[1] if found else "?", "waiting": True})
        await asyncio.sleep(120)  # the test kills the runner meanwhile
        run.answer = "too late"
