"""Three `inventory` rows and `clerk`, an agent that adds up each delivery.

Run them in a Compose project per rollout (see docs/compose.md):

    ComposeRuntime("examples/compose/compose.yaml", "/app/env.py",
                   variables={"PROCTOR_IMAGE": python_image()})
"""

from __future__ import annotations

import re
from typing import TYPE_CHECKING

from env import restock
from proctor import Taskset

if TYPE_CHECKING:
    from proctor import Run

__all__ = ["clerk", "tasks"]

_PROMPT = re.compile(r"holds (\d+) of '[^']*'\. A delivery of (\d+) arrived")

tasks = Taskset(
    "inventory",
    [
        restock(item="apples", stock=12, delivered=30),
        restock(item="pears", stock=0, delivered=7),
        restock(item="figs", stock=5, delivered=5),
    ],
)


async def clerk(run: Run) -> None:
    """Answer the stock after the delivery, read from the prompt."""
    match = _PROMPT.search(str(run.prompt))
    answer = str(int(match[1]) + int(match[2])) if match else "?"
    run.trace.add("assistant", answer)
    run.trace.content = answer
