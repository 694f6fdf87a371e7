"""Branch splitting, and the model-turn deltas a batch records, as properties."""

from __future__ import annotations

from typing import Any

from hypothesis import given
from hypothesis import strategies as st

from proctor.batch._recording import _Context
from proctor.samples import branches
from proctor.samples._sources import rebuild_turns

# What a rollout does next: a turn in conversation c (0-2; a new one starts it), a
# compaction of c before its turn, a judge's turn, or a step that is no model turn.
Action = tuple[str, int]
actions = st.lists(
    st.tuples(st.sampled_from(["turn", "turn", "compact", "judge", "tool"]), st.integers(0, 2)),
    max_size=30,
)


def play(script: list[Action]) -> tuple[list[dict[str, Any]], dict[int, tuple[int, int]]]:
    """Trace steps for `script`, and each model turn's (conversation, epoch)."""
    histories: dict[int, list[dict[str, Any]]] = {}
    epochs: dict[int, int] = {}
    steps: list[dict[str, Any]] = []
    owner: dict[int, tuple[int, int]] = {}
    for action, c in script:
        if action == "tool":
            steps.append({"kind": "tool_result", "content": "ok", "data": None})
            continue
        if action == "judge":
            steps.append(turn_step(len(steps) + 1, [{"role": "user", "content": "grade"}], True))
            continue
        history = histories.setdefault(c, [{"role": "user", "content": f"task {c}"}])
        if action == "compact":
            epochs[c] = epochs.get(c, 0) + 1
            history[1:] = [{"role": "user", "content": f"[checkpoint] {len(steps)}"}]
        number = len(steps) + 1
        steps.append(turn_step(number, list(history)))
        owner[number] = (c, epochs.get(c, 0))
        history += [reply(number), {"role": "tool", "tool_call_id": f"c{number}", "content": "x"}]
    return steps, owner


def reply(number: int) -> dict[str, Any]:
    call = {"id": f"c{number}", "type": "function", "function": {"name": "f", "arguments": "{}"}}
    return {"role": "assistant", "content": None, "tool_calls": [call]}


def turn_step(number: int, messages: list[Any], judge: bool = False) -> dict[str, Any]:
    data: dict[str, Any] = {
        "turn": number,
        "api": "chat",
        "request": {"messages": messages},
        "response": {"choices": [{"message": {**reply(number), "refusal": None}}]},
    }
    if judge:
        data["judge"] = True
    return {"kind": "model_turn", "content": reply(number), "data": data}


@given(actions)
def test_branches_cover_every_turn_but_the_judges_once(script: list[Action]) -> None:
    steps, owner = play(script)
    found = branches(steps)
    numbers = [n for b in found for n in b.numbers]
    assert sorted(numbers) == sorted(owner)  # every non-judge turn, exactly once
    for b in found:
        assert b.numbers == sorted(b.numbers)
        assert len({owner[n] for n in b.numbers}) == 1  # one conversation, one epoch
    assert len(found) == len(set(owner.values()))  # a branch per conversation and epoch


histories = st.lists(
    st.tuples(
        st.sampled_from(["grow", "grow", "shrink", "other", "retry"]),
        st.sampled_from([None, "t1", "t2"]),
    ),
    min_size=1,
    max_size=20,
)


@given(histories)
def test_recorded_deltas_rebuild_every_request(script: list[tuple[str, str | None]]) -> None:
    """What `model_turns.jsonl` keeps of each request (a delta on the previous turn's)
    gives back the whole request, a retried turn's later line winning."""
    context = _Context()
    lines: list[dict[str, Any]] = []
    sent: dict[int, tuple[list[Any], str | None]] = {}
    history: list[Any] = []
    number = 0
    for what, tools in script:
        if what == "retry" and number:
            history, tools = list(sent[number][0]), sent[number][1]
        else:
            number += 1
            history = next_history(what, history, number)
        body: dict[str, Any] = {"messages": history}
        if tools is not None:
            body["tools"] = [{"type": "function", "function": {"name": tools}}]
        sent[number] = (list(history), tools)
        response = {"choices": [{"message": {"role": "assistant", "content": "a"}}]}
        lines.append({"turn": number, "response": response, "context": context.delta(number, body)})
    rebuilt = {t.number: t for t in rebuild_turns(lines)}
    assert sorted(rebuilt) == sorted(sent)
    for n, (messages, tools) in sent.items():
        assert rebuilt[n].messages == messages
        names = [t["function"]["name"] for t in rebuilt[n].extras.get("tools") or ()]
        assert names == ([] if tools is None else [tools])


def next_history(what: str, history: list[Any], number: int) -> list[Any]:
    if what == "shrink":
        return [*history[:1], {"role": "user", "content": f"summary {number}"}]
    if what == "other":
        return [{"role": "user", "content": f"sub-agent {number}"}]
    return [*history, {"role": "user", "content": f"m{number}"}]
