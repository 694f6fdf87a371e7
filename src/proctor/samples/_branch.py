"""Model turns as a sample sees them, and a trace split into branches.

A branch is a run of model turns whose context only grows: each request's messages
extend an earlier request of the branch and its response. A compaction (a shorter or
rewritten history) or a sub-agent (an unrelated conversation) starts a new branch;
a turn that extends an earlier branch again (the parent after its sub-agent returned)
joins it. Judge turns (`data["judge"]`), a simulated user's model turns (`data["user"]`),
failed turns and turns recorded without their request are not part of any branch.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

import orjson

__all__ = ["Branch", "ModelTurn", "branches", "response_items"]


@dataclass(frozen=True, slots=True)
class ModelTurn:
    """One model call: the request's conversation, what came back, its token ids.

    `messages` are in the request's API shape (chat and Anthropic `messages`,
    Responses `input` items); `output` is the response as items of the same shape
    (a chat assistant message, an Anthropic assistant message, Responses output
    items). `tokens` holds what the server returned: `prompt_token_ids`,
    `completion_token_ids`, `logprobs` (vLLM's, through the interception proxy).
    `extras` holds the request's `tools`, `system` and `instructions`.
    """

    number: int
    api: str
    messages: list[Any]
    output: list[Any]
    model: str | None = None
    tokens: Mapping[str, Any] = field(default_factory=dict)
    extras: Mapping[str, Any] = field(default_factory=dict)

    @classmethod
    def from_step(cls, step: Any, position: int = 0) -> ModelTurn | None:
        """The turn a trace step records (a `Step` or its dict form); None when the
        step is not a usable model turn (another kind, a judge's or a simulated user's,
        failed, or without its request, as `ToolAgent` records its own turns)."""
        kind, content, data = _step_fields(step)
        if kind != "model_turn" or not isinstance(data, Mapping) or _not_the_policy(data):
            return None
        request = data.get("request")
        if not isinstance(request, Mapping) or data.get("error"):
            return None
        api = str(data.get("api") or "chat")
        output = response_items(api, data.get("response"), content)
        if not output:
            return None
        number = data.get("turn")
        return cls(
            number=number if isinstance(number, int) else position,
            api=api,
            messages=history_of(request),
            output=output,
            model=data.get("model"),
            tokens=data.get("tokens") or {},
            extras={k: request[k] for k in EXTRAS if k in request},
        )


EXTRAS = ("tools", "system", "instructions")


@dataclass(slots=True)
class Branch:
    """Consecutive (or resumed) model turns of one growing conversation."""

    turns: list[ModelTurn]

    @property
    def numbers(self) -> list[int]:
        """The turn numbers, in order."""
        return [t.number for t in self.turns]

    @property
    def prompt(self) -> list[Any]:
        """The first request's messages."""
        return self.turns[0].messages

    @property
    def completion(self) -> list[Any]:
        """Everything after the prompt: the last request's later messages (responses,
        tool results, user turns) and the last response."""
        last = self.turns[-1]
        return last.messages[len(self.prompt) :] + last.output


def branches(trace_steps: Iterable[Any]) -> list[Branch]:
    """Split a trace's model turns into branches (other steps are ignored).

    Accepts `Step`s, their dict form, or `ModelTurn`s. Every usable model turn lands
    in exactly one branch; branches are ordered by their first turn.
    """
    turns = [
        s if isinstance(s, ModelTurn) else ModelTurn.from_step(s, i + 1)
        for i, s in enumerate(trace_steps)
    ]
    return split([t for t in turns if t is not None])


def split(turns: Iterable[ModelTurn]) -> list[Branch]:
    """Branches of `turns` (in call order): each joins the latest branch it extends."""
    found: list[tuple[Branch, list[Any]]] = []  # each with its last turn's canon
    for turn in turns:
        canon = [_canon(m) for m in turn.messages]
        home = next((i for i in range(len(found) - 1, -1, -1) if _extends(*found[i], canon)), None)
        if home is None:
            found.append((Branch([turn]), canon))
        else:
            found[home][0].turns.append(turn)
            found[home] = (found[home][0], canon)
    return [b for b, _ in found]


def _extends(branch: Branch, last_canon: list[Any], canon: list[Any]) -> bool:
    """Whether messages `canon` continue the branch's last request and its response."""
    last = branch.turns[-1]
    size = len(last_canon)
    if len(canon) <= size or canon[:size] != last_canon:
        return False
    if last.api != "chat":
        return True  # other shapes come back re-encoded by clients: growth suffices
    return bool(canon[size] == _canon(last.output[0]))


def history_of(request: Mapping[str, Any]) -> list[Any]:
    """A request's conversation: chat and Anthropic `messages`, Responses `input`."""
    history = request.get("messages", request.get("input"))
    if isinstance(history, str):
        return [{"role": "user", "content": history}]
    return list(history) if isinstance(history, list) else []


def response_items(api: str, response: Any, message: Any = None) -> list[Any]:
    """A response as items of its API's request shape; `message` (the chat-shaped
    message the proxy parsed) when the body is missing."""
    if isinstance(response, Mapping):
        if api == "messages" and isinstance(response.get("content"), list):
            return [{"role": "assistant", "content": response["content"]}]
        if api == "responses" and isinstance(response.get("output"), list):
            return list(response["output"])
        choices = response.get("choices")
        if isinstance(choices, list) and choices and isinstance(choices[0], Mapping):
            found = choices[0].get("message")
            if isinstance(found, Mapping):
                return [dict(found)]
    return [message] if isinstance(message, Mapping) else []


def _step_fields(step: Any) -> tuple[Any, Any, Any]:
    if isinstance(step, Mapping):
        return step.get("kind"), step.get("content"), step.get("data")
    return getattr(step, "kind", None), getattr(step, "content", None), getattr(step, "data", None)


def _canon(message: Any) -> Any:
    """What must match for two messages to be the same turn of a conversation: role,
    text, tool calls (id, name, arguments as JSON) and the tool call answered; keys a
    client adds or drops on the way back (`refusal`, `annotations`, nulls) do not count."""
    if not isinstance(message, Mapping):
        return _json(message)
    calls = tuple(_call(c) for c in message.get("tool_calls") or ())
    return (message.get("role"), _text(message.get("content")), calls, message.get("tool_call_id"))


def _call(call: Any) -> Any:
    fn = call.get("function") if isinstance(call, Mapping) else None
    if not isinstance(fn, Mapping):
        return _json(call)
    args = fn.get("arguments")
    if isinstance(args, str):
        with contextlib.suppress(orjson.JSONDecodeError):
            args = orjson.loads(args) if args.strip() else {}
    return (call.get("id"), fn.get("name"), _json(args))


def _text(content: Any) -> Any:
    if content is None:
        return ""
    if isinstance(content, list) and all(
        isinstance(p, Mapping) and p.get("type") in ("text", "output_text", "input_text")
        for p in content
    ):
        return "".join(str(p.get("text") or "") for p in content)
    return content if isinstance(content, str) else _json(content)


def _json(value: Any) -> bytes:
    return orjson.dumps(value, option=orjson.OPT_SORT_KEYS, default=str)


def _not_the_policy(data: Mapping[str, Any]) -> bool:
    """A turn some other model took: a judge's (`data["judge"]`) or a simulated user's
    (`data["user"]`)."""
    return bool(data.get("judge") or data.get("user"))
