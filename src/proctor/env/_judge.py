"""An LLM judge for rewards: `Judge` (the grading phase's model endpoint) and `judge_reward`.

The driver opens an interception-proxy session for the grading phase and sends its
base URL and secret with `tasks.grade` (the `judge` param); `Judge.from_params` reads
them. The proxy on the other end holds the real key, retries, enforces the budgets and
records each call with its cost on the run, so `Judge.complete` makes one request and
never retries. The environment only ever sees the session's secret.

```python
env.reward(weight=1.0)(graders.judge("gpt-4.1-mini", "Full marks for a correct proof."))
```
"""

from __future__ import annotations

import json
from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import orjson

from .._errors import HttpError, ModelError, ModelRequestError

__all__ = ["Judge", "judge_reward", "last_number"]

_SYSTEM = (
    "You grade an answer to a task against a rubric. Reason briefly, then end your reply"
    " with a line `score: N`, where N is a number from {low:g} to {high:g} ({high:g} is best)."
)
_USER = "## Task\n{prompt}\n\n## Rubric\n{rubric}\n\n## Answer\n{answer}"


@dataclass(frozen=True, slots=True)
class Judge:
    """An OpenAI-compatible chat endpoint for grading (an interception-proxy session).

    Args:
        base_url: the API root, ending in `/v1`.
        api_key: the session's secret (never a provider's key); kept out of repr.
        model: the model asked when a call names none.
        timeout: seconds to wait for each part of the response.
    """

    base_url: str
    api_key: str = field(repr=False)
    model: str | None = None
    timeout: float = 300.0

    @classmethod
    def from_params(cls, data: Mapping[str, Any] | None) -> Judge | None:
        """The judge of a `tasks.grade` `judge` param `{base_url, api_key, model?}`.

        Returns:
            None when `data` is None or empty (the driver has no judge).

        Raises:
            ValueError: a field is missing or not a string.
        """
        if not data:
            return None
        base_url, api_key, model = data.get("base_url"), data.get("api_key"), data.get("model")
        if not isinstance(base_url, str) or not isinstance(api_key, str):
            raise ValueError("the judge param needs base_url and api_key strings")
        if model is not None and not isinstance(model, str):
            raise ValueError(f"the judge param's model is a string, not {type(model).__name__}")
        return cls(base_url.rstrip("/"), api_key, model)

    async def complete(
        self,
        messages: Sequence[Mapping[str, Any]],
        *,
        model: str | None = None,
        max_tokens: int = 1024,
    ) -> str:
        """Ask for one chat completion and return its text.

        Raises:
            ValueError: no model named here nor on the judge.
            ModelRequestError: the endpoint answered an error status.
            ModelError: it could not be reached, or its answer has no text.
        """
        from .._http import HttpClient  # on first use: most environments have no judge

        name = model or self.model
        if not name:
            raise ValueError("the judge has no model: name one")
        body = {"model": name, "messages": list(messages), "max_tokens": max_tokens}
        headers = [
            ("authorization", f"Bearer {self.api_key}"),
            ("content-type", "application/json"),
        ]
        url = f"{self.base_url}/chat/completions"
        try:
            async with HttpClient(read_timeout=self.timeout) as client:
                resp = await client.request("POST", url, headers=headers, body=orjson.dumps(body))
                async with resp:
                    data = await resp.read()
        except HttpError as exc:
            raise ModelError(f"judge: {url} unreachable: {exc}", cause="transport") from exc
        return _text(resp.status, data)


def _text(status: int, data: bytes) -> str:
    """The reply's text, or the error its status and body say."""
    try:
        parsed: Any = orjson.loads(data)
    except orjson.JSONDecodeError:
        parsed = None
    if status != 200:
        detail = _error_message(parsed) or data[:200].decode(errors="replace")
        raise ModelRequestError(f"judge: HTTP {status}: {detail}", status=status, cause="refused")
    try:
        text = parsed["choices"][0]["message"]["content"]
    except (TypeError, KeyError, IndexError):
        text = None
    if not isinstance(text, str):
        raise ModelError("judge: the reply has no message text", status=status, cause="malformed")
    return text


def _error_message(parsed: Any) -> str | None:
    error = parsed.get("error") if isinstance(parsed, dict) else None
    message = error.get("message") if isinstance(error, dict) else None
    return message if isinstance(message, str) else None


def last_number(reply: str) -> float:
    """The score in a judge's reply: the last number it wrote.

    Raises:
        ValueError: the reply has no number.
    """
    from ._graders import _last_number

    value = _last_number(reply)
    if value is None:
        raise ValueError(f"the judge's reply has no score: {reply[-200:]!r}")
    return value


def judge_reward(
    model: str,
    rubric: str | Callable[[Any], str],
    *,
    scale: tuple[float, float] = (0.0, 1.0),
    parse: Callable[[str], float] = last_number,
    max_tokens: int = 1024,
    name: str = "judge",
) -> Callable[..., Awaitable[float]]:
    """A reward that asks a model to grade the answer against a rubric (`graders.judge`).

    The returned async function takes `(prompt, answer, task, judge)`, injected by
    name; register it with `env.reward(weight=...)(graders.judge(...))`. Its tasks
    then ask the driver for a judge endpoint, whose calls the run's cost includes.

    Args:
        model: the model to ask (the judge proxy may pin its own).
        rubric: what a good answer is; or a function of the task (the template's
            input, or a view of its args) returning the rubric, e.g. with the
            reference answer in it.
        scale: the lowest and the highest score the model is told to give.
        parse: reads the score from the reply (default: its last number).
        max_tokens: cap on the reply.
        name: the function's `__name__`, which names the subscore.

    Returns:
        The reward function: the score mapped from `scale` onto `[0, 1]`.

    Raises (when the reward runs):
        RuntimeError: the driver sent no judge endpoint (it was given no judge proxy).
        ValueError: the reply has no score, or one outside `scale`.
        ModelError: the judge call failed.
    """
    low, high = scale
    if not high > low:
        raise ValueError(f"scale must go from low to high, got {scale!r}")

    async def reward(prompt: object, answer: object, task: object, judge: Judge | None) -> float:
        if judge is None:
            raise RuntimeError(
                f"{name}: no judge endpoint for this grading (the driver was given no judge proxy)"
            )
        text = rubric(task) if callable(rubric) else rubric
        messages = [
            {"role": "system", "content": _SYSTEM.format(low=low, high=high)},
            {"role": "user", "content": _USER.format(
                prompt=_as_text(prompt), rubric=text, answer=_as_text(answer)
            )},
        ]  # fmt: skip
        reply = await judge.complete(messages, model=model, max_tokens=max_tokens)
        return _scaled(parse(reply), low, high)

    reward.__name__ = reward.__qualname__ = name
    return reward


def _as_text(value: object) -> str:
    if value is None or isinstance(value, str):
        return value or ""
    return json.dumps(value, default=str, ensure_ascii=False, indent=1)


def _scaled(value: float, low: float, high: float) -> float:
    if not low <= value <= high:
        raise ValueError(f"the judge's score {value:g} is outside its scale {low:g}..{high:g}")
    return (value - low) / (high - low)
