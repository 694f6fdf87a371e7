"""Chat messages as `system` blocks and turns that alternate user and assistant: the
shape of Anthropic Messages and Bedrock Converse, each API writing its own blocks."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from ._types import Message
from ._wire import text_of

__all__ = ["alternating_turns"]

Block = dict[str, Any]


def alternating_turns(
    messages: list[Message],
    *,
    system: Callable[[str], Block],
    assistant: Callable[[Message], list[Block]],
    tool: Callable[[Message], Block],
    user: Callable[[Any], list[Block]],
    empty_turns: bool,
) -> tuple[list[Block], list[Message]]:
    """The system text as blocks, and the other messages as turns (fresh dicts).

    Each message becomes blocks (`assistant` of an assistant message, `tool` of a tool
    result, `user` of any other message's content); consecutive blocks of one role join
    one turn, tool results being the user's. `empty_turns=False` leaves out a message
    with no blocks (an API that refuses an empty content list).
    """
    system_blocks: list[Block] = []
    turns: list[Message] = []
    for m in messages:
        role = m.get("role")
        if role == "system":
            text = text_of(m.get("content"))
            if text:
                system_blocks.append(system(text))
            continue
        if role == "assistant":
            blocks = assistant(m)
        elif role == "tool":
            blocks = [tool(m)]
        else:
            blocks = user(m.get("content"))
        turn_role = "assistant" if role == "assistant" else "user"
        if not blocks and not empty_turns:
            continue
        if turns and turns[-1]["role"] == turn_role:
            turns[-1]["content"].extend(blocks)  # the API alternates roles
        else:
            turns.append({"role": turn_role, "content": blocks})
    return system_blocks, turns
