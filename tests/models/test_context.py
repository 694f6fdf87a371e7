"""Client compaction: deterministic, whole tool-call/result pairs, task and outcomes kept."""

from __future__ import annotations

import copy
from typing import Any

import orjson
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from proctor.models import CHECKPOINT, ContextPolicy, compact
from proctor.models._context import history_bytes, needs_compaction

SYSTEM = {"role": "system", "content": "You are a careful agent."}
TASK = {"role": "user", "content": "Fix the failing test in repo/."}


def exchange(n: int, size: int = 200, calls: int = 1) -> list[dict[str, Any]]:
    ids = [f"call_{n}_{i}" for i in range(calls)]
    assistant = {
        "role": "assistant",
        "content": None,
        "tool_calls": [
            {
                "id": i,
                "type": "function",
                "function": {"name": "shell", "arguments": f'{{"cmd": "step {n}"}}'},
            }
            for i in ids
        ],
    }
    return [
        assistant,
        *({"role": "tool", "tool_call_id": i, "content": f"out {n} " + "x" * size} for i in ids),
    ]


def history(steps: int, size: int = 200) -> list[dict[str, Any]]:
    return [SYSTEM, TASK, *(m for n in range(steps) for m in exchange(n, size))]


def assert_pairs_whole(messages: list[dict[str, Any]]) -> None:
    """Every tool result follows its call, and every call kept its results."""
    open_ids: set[str] = set()
    for m in messages:
        if m["role"] == "tool":
            assert m["tool_call_id"] in open_ids, f"orphan tool result {m['tool_call_id']}"
            open_ids.discard(m["tool_call_id"])
        else:
            assert not open_ids, f"calls without results: {open_ids}"
            open_ids = {c["id"] for c in m.get("tool_calls") or []}
    assert not open_ids


def test_under_the_limit_nothing_changes() -> None:
    messages = history(3)
    policy = ContextPolicy(max_bytes=10**6)
    assert not needs_compaction(messages, policy)
    out = compact(messages, policy)
    assert out == messages and out is not messages


def test_over_the_byte_limit_old_pairs_fold_into_a_checkpoint() -> None:
    messages = history(20)
    policy = ContextPolicy(max_bytes=3000, keep_last=3, target=0.5)
    assert needs_compaction(messages, policy)
    out = compact(messages, policy)
    assert out[:2] == [SYSTEM, TASK]
    checkpoint = out[2]
    assert checkpoint["role"] == "user" and checkpoint["content"].startswith(CHECKPOINT)
    lines = [line for line in checkpoint["content"].splitlines() if line.startswith("- ")]
    kept_steps = (len(out) - 3) // 2
    dropped = 20 - kept_steps
    assert f"{dropped} earlier steps" in checkpoint["content"]
    assert len(lines) == 3
    assert lines[-1].startswith(
        f'- shell({{"cmd": "step {dropped - 1}"}}) -> out {dropped - 1} xxx'
    )
    assert out[3:] == messages[-(len(out) - 3) :]
    assert history_bytes(out) <= 1500
    assert_pairs_whole(out)


def test_the_token_threshold_uses_known_usage_or_an_estimate() -> None:
    messages = history(5)
    policy = ContextPolicy(max_tokens=100_000)
    assert not needs_compaction(messages, policy)
    assert needs_compaction(messages, policy, input_tokens=150_000)
    small = ContextPolicy(max_tokens=100)  # ~4 bytes a token
    assert needs_compaction(messages, small)
    assert compact(messages, policy, input_tokens=150_000) != messages


def test_recompaction_accumulates_the_dropped_count_and_outcomes() -> None:
    policy = ContextPolicy(max_bytes=2500, keep_last=4, outcome_chars=60)
    first = compact(history(12), policy)
    dropped_first = int(first[2]["content"].split()[1])
    grown = first + [m for n in range(12, 20) for m in exchange(n)]
    second = compact(grown, policy)
    assert second[:2] == [SYSTEM, TASK]
    dropped_second = int(second[2]["content"].split()[1])
    kept = (len(second) - 3) // 2
    assert dropped_second == 20 - kept > dropped_first
    assert len([line for line in second[2]["content"].splitlines() if line.startswith("- ")]) == 4
    assert_pairs_whole(second)


def test_force_shrinks_even_under_the_limit_but_keeps_the_newest_step() -> None:
    messages = history(6)
    out = compact(messages, ContextPolicy(), force=True)
    assert history_bytes(out) < history_bytes(messages)
    assert out[-2:] == messages[-2:]
    assert compact(history(1), ContextPolicy(), force=True) == history(1)  # nothing to drop


def test_the_newest_step_stays_even_when_it_alone_is_too_big() -> None:
    messages = history(3) + exchange(3, size=50_000)
    out = compact(messages, ContextPolicy(max_bytes=5_000))
    assert out[-2:] == messages[-2:] and out[:2] == [SYSTEM, TASK]
    assert "3 earlier steps" in out[2]["content"] and "\n- " not in out[2]["content"]


def test_parallel_calls_and_text_turns_are_units() -> None:
    messages = [
        SYSTEM,
        TASK,
        *exchange(0, calls=3),
        {"role": "assistant", "content": "Now I will check."},
        {"role": "user", "content": [{"type": "text", "text": "Go on."}]},
        *exchange(1, calls=2),
        *exchange(2),
    ]
    out = compact(messages, ContextPolicy(keep_last=10, outcome_chars=40), force=True)
    assert_pairs_whole(out)
    text = out[2]["content"]
    assert "- assistant: Now I will check." in text and "- user: Go on." in text
    assert text.startswith(f"{CHECKPOINT} 4 earlier steps") and text.count("- shell(") == 5


def test_keep_last_zero_keeps_no_outcomes() -> None:
    out = compact(history(10), ContextPolicy(keep_last=0), force=True)
    assert "\n- " not in out[2]["content"] and "1 earlier step" not in out[2]["content"]


def test_outcomes_are_cut_to_one_short_line() -> None:
    out = compact(history(4, size=5000), ContextPolicy(outcome_chars=80), force=True)
    lines = [line for line in out[2]["content"].splitlines() if line.startswith("- ")]
    assert lines and all(len(line) <= 82 and line.endswith("...") for line in lines)


@pytest.mark.parametrize(
    "kwargs",
    [
        {"target": 0},
        {"target": 1.5},
        {"max_bytes": 0},
        {"max_tokens": -1},
        {"keep_last": -1},
        {"outcome_chars": 0},
        {"bytes_per_token": 0},
    ],
)
def test_policy_rejects_out_of_range_values(kwargs: dict[str, Any]) -> None:
    with pytest.raises(ValueError):
        ContextPolicy(**kwargs)


@st.composite
def histories(draw: st.DrawFn) -> list[dict[str, Any]]:
    messages: list[dict[str, Any]] = [SYSTEM] if draw(st.booleans()) else []
    messages.append(TASK)
    for n in range(draw(st.integers(0, 25))):
        kind = draw(st.sampled_from(["exchange", "exchange", "text", "user"]))
        if kind == "exchange":
            messages += exchange(n, draw(st.integers(0, 800)), draw(st.integers(1, 3)))
        else:
            role = "assistant" if kind == "text" else "user"
            messages.append({"role": role, "content": draw(st.text(max_size=300))})
    return messages


@settings(max_examples=300, deadline=None)
@given(
    messages=histories(),
    max_bytes=st.integers(200, 20_000),
    keep_last=st.integers(0, 6),
    target=st.sampled_from([0.3, 0.5, 1.0]),
)
def test_compaction_is_deterministic_and_never_orphans_a_tool_result(
    messages: list[dict[str, Any]], max_bytes: int, keep_last: int, target: float
) -> None:
    policy = ContextPolicy(max_bytes=max_bytes, keep_last=keep_last, target=target)
    before = orjson.dumps(messages)
    out = compact(messages, policy)
    assert orjson.dumps(messages) == before  # the input is untouched
    assert orjson.dumps(compact(copy.deepcopy(messages), policy)) == orjson.dumps(out)
    assert_pairs_whole(out)
    head = 2 if messages[0] is SYSTEM else 1
    assert out[:head] == messages[:head]
    if out == messages:
        return
    checkpoint = out[head]
    assert checkpoint["content"].startswith(CHECKPOINT)
    tail = out[head + 1 :]
    assert tail and tail == messages[len(messages) - len(tail) :]
    assert sum(line.startswith("- ") for line in checkpoint["content"].splitlines()) <= keep_last
    budget = target * min(history_bytes(messages), max_bytes)
    newest_only = tail[0].get("role") != "tool" and all(m["role"] == "tool" for m in tail[1:])
    assert history_bytes(out) <= budget or newest_only
    # compacting the result again changes nothing unless it is still over the limit
    if not needs_compaction(out, policy):
        assert compact(out, policy) == out
