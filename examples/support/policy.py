"""Scripted stand-ins for the two models of `support`, so it runs offline end to end.

`agent_policy` plays the support agent (a `ToolAgent` calling `talk_to_user`);
`user_policy` plays the customer for `ModelUser` (its persona names the order).
`OfflineAgent` serves `agent_policy` from a `FakeModelServer` per rollout; set
`SUPPORT_MODEL` (e.g. `openai/gpt-4.1-mini`) to use a real model instead.
"""

from __future__ import annotations

import os
import re
from typing import TYPE_CHECKING

from proctor.agents import ToolAgent
from proctor.testing import FakeModelServer, FakeRequest, Reply

if TYPE_CHECKING:
    from proctor import Run

__all__ = ["OfflineAgent", "agent_policy", "user_policy"]

_ORDER = re.compile(r"\border (\d+)")
ENDED = "The user has ended the conversation."


def agent_policy(request: FakeRequest) -> Reply:
    """The agent's next turn: ask, confirm, say it is done, then answer."""
    replies = [str(m["content"]) for m in request.messages if m["role"] == "tool"]
    if not replies:
        return Reply.tool("talk_to_user", message="Sorry to hear that! Which order is it?")
    order = next((m[1] for r in replies if (m := _ORDER.search(r))), None)
    if order is None:
        return Reply(text="I could not find the order number.")
    if len(replies) == 1:
        return Reply.tool("talk_to_user", message=f"Shall I refund order {order}?")
    if replies[-1] != ENDED:
        return Reply.tool("talk_to_user", message=f"Done: order {order} is refunded.")
    return Reply(text=f"REFUND {order}")


def user_policy(request: FakeRequest) -> Reply:
    """The customer's next line (the model sees the agent as `user`, itself as `assistant`)."""
    system = next(str(m["content"]) for m in request.messages if m["role"] == "system")
    order = _ORDER.search(system)
    heard = sum(1 for m in request.messages if m["role"] == "user")  # the agent's messages
    if order is None:
        return Reply(text="###DONE###")
    if heard == 1:
        return Reply(text=f"My order {order[1]} arrived broken.")
    if heard == 2:
        return Reply(text="Yes, refund it please.")
    return Reply(text="Thanks! ###DONE###")


class OfflineAgent:
    """A `ToolAgent` on `agent_policy`, served by a fake model server per rollout."""

    async def __call__(self, run: Run) -> None:
        model = os.environ.get("SUPPORT_MODEL")
        if model:
            await ToolAgent(model, max_steps=12)(run)
            return
        async with FakeModelServer(agent_policy) as fake:
            await ToolAgent(f"fake/support@{fake.url}", max_steps=8)(run)
