"""A scripted stand-in for a computer-use model, so the `form` example runs offline.

`policy` reads the values from the prompt and answers as a model would with the
`computer_action` tool: one batch that clicks each field of the form (its layout is
known: `app.py`), types the value, ticks Subscribe if asked, presses Save and waits
a moment for the app to redraw; then, when that frame came back, `done`.
`native_policy` plays the same clicks and typing as Anthropic's native computer tool
would call them. `OfflineAgent` serves either from `proctor.testing.FakeModelServer`
with a `ComputerAgent` in front of it. Set `FORM_MODEL` (e.g. `openai/gpt-4.1`) to
give the form to a real model instead.
"""

from __future__ import annotations

import os
import re
from typing import TYPE_CHECKING, Any

from proctor.agents import ComputerAgent
from proctor.testing import FakeModelServer, FakeRequest, FakeToolCall, Reply

if TYPE_CHECKING:
    from proctor import Run

__all__ = ["Native", "OfflineAgent", "native_policy", "policy"]

NAME, EMAIL, SUBSCRIBE, SAVE = (240, 25), (240, 65), (150, 105), (160, 160)
_PROMPT = re.compile(r'name "([^"]*)", email "([^"]*)", (tick|leave unticked)')


def _task(request: FakeRequest) -> tuple[str, str, bool]:
    """The name, email and Subscribe choice the prompt asks for."""
    prompt = next(str(m["content"]) for m in request.messages if m["role"] == "user")
    found = _PROMPT.search(prompt)
    if found is None:
        raise ValueError(f"not a sign-up prompt: {prompt[:80]!r}")
    return found[1], found[2], found[3] == "tick"


def _click(point: tuple[int, int]) -> dict[str, Any]:
    return {"type": "click", "x": point[0], "y": point[1], "button": "left", "count": 1}


def policy(request: FakeRequest) -> Reply:
    """The first turn fills in and saves the form; the next one says done."""
    if any(m["role"] == "tool" for m in request.messages):
        return Reply.actions({"type": "done"})
    name, email, subscribe = _task(request)
    actions = [_click(NAME), {"type": "type", "text": name}]
    actions += [_click(EMAIL), {"type": "type", "text": email}]
    if subscribe:
        actions.append(_click(SUBSCRIBE))
    # the app redraws after it handled the events: wait for it before the frame
    return Reply.actions(*actions, _click(SAVE), {"type": "wait", "ms": 300})


def native_policy(request: FakeRequest) -> Reply:
    """The same, one native `computer` call per turn (Anthropic's tool: one action a
    call), then a text answer, which ends a native rollout."""
    name, email, subscribe = _task(request)
    steps: list[dict[str, Any]] = [
        {"action": "left_click", "coordinate": list(NAME)},
        {"action": "type", "text": name},
        {"action": "left_click", "coordinate": list(EMAIL)},
        {"action": "type", "text": email},
    ]
    if subscribe:
        steps.append({"action": "left_click", "coordinate": list(SUBSCRIBE)})
    steps.append({"action": "left_click", "coordinate": list(SAVE)})
    done = sum(1 for m in request.messages if m["role"] == "tool")
    done = max(done, sum(1 for m in request.messages if m["role"] == "assistant"))
    if done >= len(steps):
        return Reply(text="The form is saved.")
    return Reply(tool_calls=[FakeToolCall("computer", steps[done], native=True)])


class OfflineAgent:
    """A `ComputerAgent` with the `computer_action` tool on `policy`, served by a fake
    model server per rollout (Chat Completions)."""

    async def __call__(self, run: Run) -> None:
        model = os.environ.get("FORM_MODEL")
        if model:
            await ComputerAgent(model, max_actions=200)(run)
            return
        async with FakeModelServer(policy) as fake:
            await ComputerAgent(f"fake/form@{fake.url}", max_actions=50)(run)


class Native:
    """A `ComputerAgent` with Anthropic's native computer tool on `native_policy`,
    served by a fake model server per rollout (Anthropic Messages)."""

    async def __call__(self, run: Run) -> None:
        async with FakeModelServer(native_policy) as fake:
            await ComputerAgent(f"anthropic/claude-sonnet-4-5@{fake.origin}", native=True)(run)
