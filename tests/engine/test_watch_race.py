"""A substrate that dies as the agent phase ends: its death, heard after the watch
closed, cancels nothing that follows (grading got a CancelledError out of `rollout()`)."""

from __future__ import annotations

import asyncio
from types import SimpleNamespace
from typing import Any

import pytest

from proctor._errors import SubstrateLost
from proctor.engine._watch import SubstrateWatch


async def test_a_death_heard_after_the_watch_closed_cancels_nothing() -> None:
    died: asyncio.Future[str] = asyncio.get_running_loop().create_future()
    run: Any = SimpleNamespace(client=None, phase="agent")
    task = asyncio.current_task()
    assert task is not None
    with SubstrateWatch(run, died, task):
        died.set_result("killed by SIGKILL")  # its callback is scheduled, not yet run
    await asyncio.sleep(0)  # the callback runs now, the watch closed
    await asyncio.sleep(0.01)  # what follows (grading) is not cancelled
    assert task.cancelling() == 0


async def test_a_death_during_the_watch_still_fails_the_phase() -> None:
    died: asyncio.Future[str] = asyncio.get_running_loop().create_future()
    run: Any = SimpleNamespace(client=None, phase="agent")
    task = asyncio.current_task()
    assert task is not None
    with pytest.raises(SubstrateLost, match="killed by SIGKILL"), SubstrateWatch(run, died, task):
        died.set_result("killed by SIGKILL")
        await asyncio.sleep(1)
