"""`Sample`: one branch of one rollout, as a trainer consumes it."""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import asdict, dataclass
from typing import Any

from ._branch import Branch, ModelTurn, branches

__all__ = ["Rollout", "Sample", "samples_of"]


@dataclass(frozen=True, slots=True)
class Sample:
    """One branch of a rollout: a prompt, its completion, the reward it earned.

    Token fields are None unless the model server returned token ids for every turn of
    the branch (vLLM's `return_token_ids`) and each turn's prompt ids extend the
    previous turn's prompt and completion ids. Then `completion_token_ids` is every
    token after the prompt: each turn's generated tokens (mask 1) and, between them,
    the tokens the environment added to the context (tool results, user turns: mask
    0, logprob 0.0). `completion_logprobs` is None when any turn came without them.

    `turns` are the model turn numbers the branch holds (usually a range; a parent
    conversation resumed after a sub-agent skips the sub-agent's turns).
    """

    rollout_id: str
    branch: int
    turns: list[int]
    task: str
    model: str | None
    group_id: str | None
    reward: float | None
    advantage: float | None
    prompt: list[Any]
    completion: list[Any]
    tools: list[Any] | None = None
    prompt_token_ids: list[int] | None = None
    completion_token_ids: list[int] | None = None
    completion_logprobs: list[float] | None = None
    completion_mask: list[int] | None = None

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready form (the JSONL export's line)."""
        return asdict(self)


@dataclass(frozen=True, slots=True)
class Rollout:
    """What samples need of a rollout besides its model turns."""

    id: str
    task: str
    model: str | None
    group_id: str | None
    reward: float | None
    advantage: float | None


def samples_of(rollout: Rollout, turns: Iterable[ModelTurn]) -> list[Sample]:
    """One sample per branch of `turns`."""
    return [_sample(rollout, i, b) for i, b in enumerate(branches(turns))]


def _sample(rollout: Rollout, index: int, branch: Branch) -> Sample:
    first = branch.turns[0]
    tools = first.extras.get("tools")
    ids = _tokens(branch.turns)
    return Sample(
        rollout_id=rollout.id,
        branch=index,
        turns=branch.numbers,
        task=rollout.task,
        model=rollout.model or first.model,
        group_id=rollout.group_id,
        reward=rollout.reward,
        advantage=rollout.advantage,
        prompt=branch.prompt,
        completion=branch.completion,
        tools=tools if isinstance(tools, list) else None,
        **(ids or {}),
    )


def _tokens(turns: Sequence[ModelTurn]) -> dict[str, Any] | None:
    """The branch's token fields, or None when they cannot be put together."""
    prompt = _ids(turns[0].tokens.get("prompt_token_ids"))
    if prompt is None:
        return None
    ids: list[int] = []
    mask: list[int] = []
    logprobs: list[float] | None = []
    for turn in turns:
        context = _ids(turn.tokens.get("prompt_token_ids"))
        generated = _ids(turn.tokens.get("completion_token_ids"))
        seen = len(prompt) + len(ids)
        if context is None or generated is None or context[:seen] != prompt + ids:
            return None
        added = context[seen:]
        ids += added + generated
        mask += [0] * len(added) + [1] * len(generated)
        logprobs = _logprobs(logprobs, len(added), turn.tokens.get("logprobs"), len(generated))
    return {
        "prompt_token_ids": prompt,
        "completion_token_ids": ids,
        "completion_logprobs": logprobs,
        "completion_mask": mask,
    }


def _logprobs(
    so_far: list[float] | None, added: int, given: Any, generated: int
) -> list[float] | None:
    if so_far is None or not isinstance(given, list) or len(given) != generated:
        return None
    if not all(isinstance(x, int | float) for x in given):
        return None
    return so_far + [0.0] * added + [float(x) for x in given]


def _ids(value: Any) -> list[int] | None:
    if isinstance(value, list) and all(isinstance(x, int) for x in value):
        return value
    return None
