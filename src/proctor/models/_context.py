"""Deterministic client-side compaction of a chat history.

A history is a head (the leading system messages and the first user message, the
task) followed by units: an assistant message with its tool calls and their results,
or any other single message. Compaction drops the oldest whole units, never half a
pair, and records what they achieved in one checkpoint message right after the head,
so the model keeps the task and the latest outcomes. Same input, same output: the
kept prefix stays byte-identical, which keeps provider prompt caches warm.

Images are measured as they will be sent (base64). `drop_frames` replaces the oldest
image parts with `OMITTED` first, never a reference image nor the newest one, and
never removes a message, so tool call/result pairs stay whole; a checkpoint carries
the reference images and the newest one of the steps it folds.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass
from typing import Any

import orjson

from ._content import OMITTED, encoded_size, is_image, is_reference, message_bytes
from ._wire import text_of

__all__ = [
    "CHECKPOINT",
    "ContextPolicy",
    "compact",
    "drop_frames",
    "history_bytes",
    "needs_compaction",
]

Message = dict[str, Any]

CHECKPOINT = "[checkpoint]"
"""The first word of a checkpoint message's content."""

_PLACEHOLDER = orjson.dumps({"type": "text", "text": OMITTED})

_COUNT = re.compile(r"\[checkpoint\] (\d+) earlier step")


@dataclass(frozen=True, slots=True)
class ContextPolicy:
    """When and how far to compact.

    Args:
        max_bytes: compact when the serialized history exceeds this many bytes.
        max_tokens: compact when the input exceeds this many tokens (the last
            response's `usage.input_tokens` when known, else bytes / `bytes_per_token`).
        keep_last: how many outcomes of dropped steps the checkpoint keeps.
        target: compact down to this fraction of the limit, so compaction (and a cold
            prompt cache) happens rarely, not on every step.
        outcome_chars: each outcome in the checkpoint is cut to this many characters.
        bytes_per_token: the estimate used when no token count is known.
        max_frames: keep at most this many images (reference images not counted; the
            newest is always kept), dropping the oldest first.
        max_turns: compact when more than this many completed turns follow the task
            (a turn: an assistant message with its tool results, or any other message).
        max_messages: compact when the history holds more than this many messages.

    Raises:
        ValueError: a field is out of range.
    """

    max_bytes: int | None = None
    max_tokens: int | None = None
    keep_last: int = 5
    target: float = 0.5
    outcome_chars: int = 300
    bytes_per_token: float = 4.0
    max_frames: int | None = None
    max_turns: int | None = None
    max_messages: int | None = None

    def __post_init__(self) -> None:
        if not 0 < self.target <= 1:
            raise ValueError(f"ContextPolicy.target must be within (0, 1], not {self.target!r}")
        if self.max_frames is not None and self.max_frames < 0:
            raise ValueError(f"ContextPolicy.max_frames must be >= 0, not {self.max_frames!r}")
        for name in ("max_bytes", "max_tokens", "max_turns", "max_messages"):
            value = getattr(self, name)
            if value is not None and value <= 0:
                raise ValueError(f"ContextPolicy.{name} must be > 0, not {value!r}")
        if self.keep_last < 0 or self.outcome_chars < 1 or self.bytes_per_token <= 0:
            raise ValueError(
                "ContextPolicy: keep_last, outcome_chars, bytes_per_token out of range"
            )

    def limit_bytes(self) -> float:
        """The byte size both limits allow (infinite without limits)."""
        limits = [math.inf]
        if self.max_bytes is not None:
            limits.append(self.max_bytes)
        if self.max_tokens is not None:
            limits.append(self.max_tokens * self.bytes_per_token)
        return min(limits)


def history_bytes(messages: list[Message]) -> int:
    """The size of `messages` as compact JSON, images counted as sent (base64)."""
    return 2 + sum(message_bytes(m) for m in messages) + max(0, len(messages) - 1)


def _bytes(message: Message) -> int:
    return message_bytes(message)


def drop_frames(
    messages: list[Message], *, max_frames: int | None = None, free_bytes: int = 0
) -> tuple[list[Message], int]:
    """`messages` with their oldest images replaced by `OMITTED`, and how many were.

    Drops until at most `max_frames` images are left (reference images not counted)
    and the dropped images' encoded sizes add up to `free_bytes`, or nothing droppable
    is left. Reference images and the newest image are never dropped; no message is
    removed or reordered. `messages` is not modified.
    """
    spots = [
        (i, j)
        for i, m in enumerate(messages)
        if isinstance(m.get("content"), list)
        for j, part in enumerate(m["content"])
        if is_image(part) and not is_reference(part)
    ]
    droppable = spots[:-1]  # the newest stays
    extra = len(spots) - max_frames if max_frames is not None else 0
    chosen: list[tuple[int, int]] = []
    freed = 0
    for spot in droppable:
        if len(chosen) >= extra and freed >= free_bytes:
            break
        chosen.append(spot)
        freed += encoded_size(messages[spot[0]]["content"][spot[1]]) - len(_PLACEHOLDER)
    if not chosen:
        return list(messages), 0
    out = list(messages)
    for i, j in chosen:
        if out[i] is messages[i]:
            out[i] = {**messages[i], "content": list(messages[i]["content"])}
        out[i]["content"][j] = {"type": "text", "text": OMITTED}
    return out, len(chosen)


def needs_compaction(
    messages: list[Message], policy: ContextPolicy, *, input_tokens: int | None = None
) -> bool:
    """Whether `messages` exceed the policy's byte, token, turn or message limit."""
    return _over_size(messages, policy, input_tokens) or _over_count(messages, policy)


def _over_size(messages: list[Message], policy: ContextPolicy, input_tokens: int | None) -> bool:
    size = history_bytes(messages)
    if policy.max_bytes is not None and size > policy.max_bytes:
        return True
    tokens = input_tokens if input_tokens is not None else size / policy.bytes_per_token
    return policy.max_tokens is not None and tokens > policy.max_tokens


def _over_count(messages: list[Message], policy: ContextPolicy) -> bool:
    if policy.max_messages is not None and len(messages) > policy.max_messages:
        return True
    return policy.max_turns is not None and len(_split(messages)[2]) > policy.max_turns


def compact(
    messages: list[Message],
    policy: ContextPolicy,
    *,
    input_tokens: int | None = None,
    force: bool = False,
) -> list[Message]:
    """`messages` with the oldest steps folded into a checkpoint, when over the limit.

    Drops the fewest oldest units that bring the history under `target` times each
    limit it exceeds (bytes: times the limit or its current size, whichever is
    smaller; a count limit: `target` times that many turns or messages). The newest
    unit is always kept; when it alone is too big, the checkpoint keeps fewer outcomes.
    Returns a copy of `messages` unchanged when under the limit and not `force`d,
    or when there is nothing to drop.

    Args:
        messages: the history in chat shape; it is not modified.
        policy: the limits.
        input_tokens: the last known prompt size in tokens, if any.
        force: compact even under the limit (e.g. after a 413).
    """
    by_size = force or _over_size(messages, policy, input_tokens)
    by_count = _over_count(messages, policy)
    if not by_size and not by_count:
        return list(messages)
    head, prior, units = _split(messages)
    if len(units) < 2:
        return list(messages)
    budget = policy.target * min(history_bytes(messages), policy.limit_bytes())
    if not by_size:
        budget = math.inf
    turns, tail_messages = _count_budgets(policy, len(head)) if by_count else (None, None)
    dropped_before, outcomes = _read_checkpoint(prior)
    newest = _newest_image(messages)
    fixed = sum(_bytes(m) for m in head) + 1 + len(head) + 1  # brackets and commas
    rest = [sum(_bytes(m) + 1 for m in unit) for unit in units]  # each message and its comma

    carried = _images([prior] if prior else [])

    def size(k: int, kept: list[str]) -> int:
        return fixed + _bytes(_checkpoint(dropped_before + k, kept, carried)) + sum(rest[k:])

    def counted(k: int) -> bool:
        fewer_turns = turns is None or len(units) - k <= turns
        after = sum(len(unit) for unit in units[k:])
        return fewer_turns and (tail_messages is None or after <= tail_messages)

    for k in range(1, len(units)):
        outcomes += _outcomes(units[k - 1], policy.outcome_chars)
        carried = _kept_images(carried + _images(units[k - 1]), newest)
        kept = outcomes[-policy.keep_last :] if policy.keep_last else []
        if size(k, kept) <= budget and counted(k):
            break
    while kept and size(k, kept) > budget:  # only the newest step is left: fewer outcomes
        kept = kept[1:]
    tail = [m for unit in units[k:] for m in unit]
    return [*head, _checkpoint(dropped_before + k, kept, carried), *tail]


def _count_budgets(policy: ContextPolicy, head: int) -> tuple[int | None, int | None]:
    """The turns and the messages after the checkpoint that a compaction keeps."""
    turns = None if policy.max_turns is None else max(1, int(policy.target * policy.max_turns))
    messages = None
    if policy.max_messages is not None:
        messages = max(1, int(policy.target * policy.max_messages) - head - 1)
    return turns, messages


def _images(messages: list[Message]) -> list[dict[str, Any]]:
    return [
        p
        for m in messages
        if isinstance(m.get("content"), list)
        for p in m["content"]
        if is_image(p)
    ]


def _newest_image(messages: list[Message]) -> dict[str, Any] | None:
    images = [p for p in _images(messages) if not is_reference(p)]
    return images[-1] if images else None


def _kept_images(
    images: list[dict[str, Any]], newest: dict[str, Any] | None
) -> list[dict[str, Any]]:
    """The reference images (each once) and the newest image, in order."""
    kept: list[dict[str, Any]] = []
    seen: set[bytes] = set()
    for part in images:
        if part is newest or (is_reference(part) and orjson.dumps(part) not in seen):
            seen.add(orjson.dumps(part))
            kept.append(part)
    return kept


def _split(messages: list[Message]) -> tuple[list[Message], Message | None, list[list[Message]]]:
    """Head, the existing checkpoint (if any), and the units after them."""
    i = 0
    while i < len(messages) and messages[i].get("role") == "system":
        i += 1
    if i < len(messages) and messages[i].get("role") == "user":
        i += 1
    head = messages[:i]
    prior = None
    if i < len(messages) and _is_checkpoint(messages[i]):
        prior = messages[i]
        i += 1
    units: list[list[Message]] = []
    while i < len(messages):
        j = i + 1
        ids = {c.get("id") for c in messages[i].get("tool_calls") or [] if isinstance(c, dict)}
        if messages[i].get("role") == "assistant" and ids:
            while j < len(messages) and messages[j].get("role") == "tool":
                if messages[j].get("tool_call_id") not in ids:
                    break
                j += 1
        units.append(messages[i:j])
        i = j
    return head, prior, units


def _is_checkpoint(message: Message) -> bool:
    return message.get("role") == "user" and text_of(message.get("content")).startswith(CHECKPOINT)


def _read_checkpoint(message: Message | None) -> tuple[int, list[str]]:
    if message is None:
        return 0, []
    text = text_of(message["content"])
    match = _COUNT.match(text)
    lines = [line[2:] for line in text.splitlines() if line.startswith("- ")]
    return (int(match.group(1)) if match else 0), lines


def _checkpoint(dropped: int, outcomes: list[str], images: list[dict[str, Any]]) -> Message:
    text = (
        f"{CHECKPOINT} {dropped} earlier step{'s' if dropped != 1 else ''} of this "
        "conversation were removed to keep the context small."
    )
    if outcomes:
        text += " Their latest outcomes, oldest first:\n" + "\n".join(f"- {o}" for o in outcomes)
    if images:
        return {"role": "user", "content": [{"type": "text", "text": text}, *images]}
    return {"role": "user", "content": text}


def _outcomes(unit: list[Message], limit: int) -> list[str]:
    first = unit[0]
    calls = [c for c in first.get("tool_calls") or [] if isinstance(c, dict)]
    if first.get("role") == "assistant" and calls:
        results = {m.get("tool_call_id"): text_of(m.get("content")) for m in unit[1:]}
        lines = []
        for call in calls:
            fn = call.get("function") or {}
            result = results.get(call.get("id"), "(no result)")
            lines.append(_cut(f"{fn.get('name')}({fn.get('arguments', '')}) -> {result}", limit))
        return lines
    return [_cut(f"{first.get('role')}: {text_of(first.get('content'))}", limit)]


def _cut(text: str, limit: int) -> str:
    text = " ".join(text.split())
    return text if len(text) <= limit else text[: max(0, limit - 3)] + "..."
