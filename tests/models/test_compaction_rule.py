"""The client compaction rule by count: after M completed turns (or N messages), drop
whole tool pairs, keep a checkpoint with the K latest outcomes, reattach the task, the
reference image and the current frame."""

from __future__ import annotations

from typing import Any

import pytest

from _support.images import png_bytes
from proctor.models import CHECKPOINT, ContextPolicy, ImagePart, compact
from proctor.models._context import needs_compaction

Message = dict[str, Any]


def history(steps: int) -> list[Message]:
    reference = ImagePart("image/png", data=png_bytes(64, 99), reference=True).to_dict()
    out: list[Message] = [
        {"role": "system", "content": "Drive the desktop."},
        {"role": "user", "content": [{"type": "text", "text": "Match this."}, reference]},
    ]
    for n in range(steps):
        call = {"id": f"c{n}", "type": "function", "function": {"name": "click", "arguments": "{}"}}
        frame = ImagePart("image/png", data=png_bytes(64, n)).to_dict()
        out += [
            {"role": "assistant", "content": None, "tool_calls": [call]},
            {
                "role": "tool",
                "tool_call_id": f"c{n}",
                "content": [{"type": "text", "text": f"step {n}"}, frame],
            },
        ]
    return out


def test_more_completed_turns_than_the_rule_allows_compacts_to_half() -> None:
    policy = ContextPolicy(max_turns=6, keep_last=3)
    assert not needs_compaction(history(6), policy)
    messages = history(10)
    assert needs_compaction(messages, policy)
    out = compact(messages, policy)
    assert out[:2] == messages[:2]  # the task, with its reference image
    text = out[2]["content"]  # text only: the reference stays in the task, the frame after
    assert text.startswith(f"{CHECKPOINT} 7 earlier steps")
    assert [line for line in text.splitlines() if line.startswith("- ")] == [
        f"- click({{}}) -> step {n}" for n in (4, 5, 6)
    ]
    assert out[3:] == messages[-6:]  # three whole pairs, the current frame among them
    assert compact(out, policy) == out  # under the rule now: unchanged


def test_more_messages_than_the_rule_allows_compacts_to_half() -> None:
    policy = ContextPolicy(max_messages=24, keep_last=5)
    messages = history(12)  # 26 messages
    out = compact(messages, policy)
    assert len(out) <= 12 and out[:2] == messages[:2]
    assert out[-1] == messages[-1] and out[-2]["tool_calls"][0]["id"] == "c11"
    assert [m.get("role") for m in out[3:]] == ["assistant", "tool"] * ((len(out) - 3) // 2)


@pytest.mark.parametrize("field", ["max_turns", "max_messages"])
def test_count_limits_must_be_positive(field: str) -> None:
    with pytest.raises(ValueError, match=f"ContextPolicy.{field} must be > 0"):
        ContextPolicy(**{field: 0})
