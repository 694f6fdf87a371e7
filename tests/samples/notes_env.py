"""The environment and agent the sample tests roll out (runtimes load it by path).

`count` asks for `n` notes, then the word "done". The fake model (`make_policy`) calls the
`note` tool until the conversation shows `n` steps (tool results plus the steps a
compaction checkpoint says it dropped), then answers: "done" for every other answer
it gives, "nope" for the rest, so a group of 4 scores 1, 0, 1, 0.
"""

from __future__ import annotations

import itertools
import re
from typing import Any

from proctor import Environment
from proctor.agents import ToolAgent
from proctor.models import ContextPolicy
from proctor.testing import FakeRequest, Reply

notes = Environment("notes")
NOTES = 6  # note calls per rollout: with COMPACT_AT, a compaction after the 4th turn
COMPACT_AT = 1500
VLLM = {"logprobs": True, "return_token_ids": True}
STEP = re.compile(r"\[checkpoint\] (\d+) earlier step")
FILLER = "lorem ipsum dolor sit amet " * 6


@notes.template
async def count(n: int):
    answer = yield f"Take {n} notes with the note tool, then answer done."
    yield 1.0 if str(answer).strip() == "done" else 0.0


@notes.template
async def strict(n: int):
    yield f"Take {n} notes with the note tool, then answer done."


@strict.reward
def exactly_done(answer: str) -> float:
    if answer != "done":
        raise ValueError("no grade for that")
    return 1.0


@notes.template
async def talk():
    answer = yield "Talk a while."
    yield 1.0 if answer else 0.0


def note(text: str) -> str:
    """Keep a note."""
    return f"noted {len(text)} characters"


def steps_taken(messages: list[dict[str, Any]]) -> int:
    """Tool results in the conversation plus those a checkpoint message stands for."""
    done = sum(1 for m in messages if m.get("role") == "tool")
    for m in messages:
        found = STEP.search(str(m.get("content") or ""))
        if found:
            done += int(found.group(1))
    return done


def make_policy(n: int) -> Any:
    """The fake model: `n` note calls, then "done" and "nope" by turns."""
    answers = itertools.cycle(["done", "nope"])

    def policy(request: FakeRequest) -> Reply:
        if steps_taken(request.messages) < n:
            return Reply.tool("note", text=FILLER)
        return Reply(text=next(answers))

    return policy


def compacting_agent(params: dict[str, Any] | None = None) -> ToolAgent:
    """A `ToolAgent` with the `note` tool whose history is compacted mid-rollout."""
    return ToolAgent(
        "openai/fake-model",
        tools=[note],
        context=ContextPolicy(max_bytes=COMPACT_AT),
        params=VLLM if params is None else params,
    )
