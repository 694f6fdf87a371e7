"""An LLM judge for rewards: `Judge` (the grading phase's model endpoint) and `judge_reward`.

The driver opens an interception-proxy session for the grading phase and sends its
base URL and secret with `tasks.grade` (the `judge` param); `Judge.from_params` reads
them. The proxy on the other end holds the real key, retries, enforces the budgets and
records each call with its cost on the run, so `Judge.complete` makes one request and
never retries. The environment only ever sees the session's secret.

```python
env.reward(weight=1.0)(graders.judge("gpt-4.1-mini", "Full marks for a correct proof."))
```

A vision judge is the same reward with images: `image=` the final frame of a desktop or
browser capability (its name) or a rendered artifact (a function of the run), and
`reference=` the image to compare it with. They go into the user message as image
parts, after the text.
"""

from __future__ import annotations

import base64
import inspect
import json
import os
from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import orjson

from .._errors import HttpError, ModelError, ModelRequestError
from ._computer_actions import FrameOptions

__all__ = ["Judge", "image_part", "judge_reward", "last_number"]

_SYSTEM = (
    "You grade an answer to a task against a rubric. Reason briefly, then end your reply"
    " with a line `score: N`, where N is a number from {low:g} to {high:g} ({high:g} is best)."
)
_USER = "## Task\n{prompt}\n\n## Rubric\n{rubric}\n\n## Answer\n{answer}"
_REFERENCE = "## Reference image\nWhat the result should look like."
_RESULT = "## Result image\nWhat the agent left: grade this one."

MAX_IMAGE = 20 * 1024 * 1024
"""Bytes one judged image may have (providers refuse larger ones)."""

_MAGIC = (
    (b"\x89PNG\r\n\x1a\n", "image/png"),
    (b"\xff\xd8\xff", "image/jpeg"),
    (b"GIF87a", "image/gif"),
    (b"GIF89a", "image/gif"),
)

Image = Any
"""An image the judge sees: its bytes (PNG, JPEG, GIF or WebP), a file path, a `Frame`
(`DesktopClient`), an `ImagePart` or its dict (`{"type": "image", "media_type",
"path" | "data"}`)."""


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
    from ._numbers import last_number as number_in

    value = number_in(reply)
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
    image: str | Callable[[Any], Any] | None = None,
    reference: Image | Callable[[Any], Any] | None = None,
) -> Callable[..., Awaitable[float]]:
    """A reward that asks a model to grade the answer against a rubric (`graders.judge`).

    The returned async function takes `(prompt, answer, task, judge, run)`, injected by
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
        image: the result to grade as an image: a desktop or browser capability's name
            (its screen when grading begins: the final frame), or a function of the
            run (`GradeContext`, sync or async) returning an `Image`, e.g. an artifact
            the task rendered.
        reference: the image to compare it with: an `Image`, or a function of the task
            returning one (sync or async).

    Returns:
        The reward function: the score mapped from `scale` onto `[0, 1]`.

    Raises (when the reward runs):
        RuntimeError: the driver sent no judge endpoint (it was given no judge proxy),
            or `image` names a capability the run does not have.
        ValueError: the reply has no score, or one outside `scale`; an image that is
            not a PNG, JPEG, GIF or WebP, or over `MAX_IMAGE` bytes.
        ModelError: the judge call failed.
    """
    low, high = scale
    if not high > low:
        raise ValueError(f"scale must go from low to high, got {scale!r}")
    if image is not None and not (isinstance(image, str) or callable(image)):
        raise TypeError(f"image is a capability name or a function of the run, not {image!r}")

    async def reward(
        prompt: object, answer: object, task: object, judge: Judge | None, run: Any = None
    ) -> float:
        if judge is None:
            raise RuntimeError(
                f"{name}: no judge endpoint for this grading (the driver was given no judge proxy)"
            )
        text = rubric(task) if callable(rubric) else rubric
        user = _USER.format(prompt=_as_text(prompt), rubric=text, answer=_as_text(answer))
        content: str | list[dict[str, Any]] = user
        if image is not None or reference is not None:
            content = [{"type": "text", "text": user}]
            if reference is not None:
                ref = await _called(reference, task) if callable(reference) else reference
                content += [{"type": "text", "text": _REFERENCE}, image_part(ref, "reference")]
            if image is not None:
                shown = await _result(image, run, name)
                content += [{"type": "text", "text": _RESULT}, image_part(shown, "image")]
        messages: list[dict[str, Any]] = [
            {"role": "system", "content": _SYSTEM.format(low=low, high=high)},
            {"role": "user", "content": content},
        ]
        reply = await judge.complete(messages, model=model, max_tokens=max_tokens)
        return _scaled(parse(reply), low, high)

    reward.__name__ = reward.__qualname__ = name
    return reward


async def _called(fn: Callable[[Any], Any], arg: Any) -> Any:
    value = fn(arg)
    return await value if inspect.isawaitable(value) else value


async def _result(image: str | Callable[[Any], Any], run: Any, name: str) -> Image:
    """The image to grade: a capability's current frame (PNG), or what `image(run)` gave."""
    if callable(image):
        return await _called(image, run)
    servers = getattr(run, "capabilities", None) or {}
    server: Any = servers.get(image)
    if not callable(getattr(server, "frame", None)):
        raise RuntimeError(f"{name}: image={image!r} names no desktop or browser of this run")
    data, _, _ = await server.frame(FrameOptions())
    return data


def image_part(value: Image, what: str = "image") -> dict[str, Any]:
    """`value` as a Chat Completions image part (a base64 `data:` URL).

    Raises:
        ValueError: not an image this judge can send (`what` names it in the message).
    """
    media, data = _image_bytes(value, what)
    if len(data) > MAX_IMAGE:
        raise ValueError(f"{what}: {len(data):,} bytes, over the judge's {MAX_IMAGE:,}")
    sniffed = _sniff(data)
    if sniffed is None or (media is not None and media != sniffed):
        raise ValueError(f"{what}: not a PNG, JPEG, GIF or WebP image ({media or 'bytes'})")
    url = f"data:{sniffed};base64,{base64.b64encode(data).decode()}"
    return {"type": "image_url", "image_url": {"url": url}}


def _image_bytes(value: Image, what: str) -> tuple[str | None, bytes]:
    """(the stated media type or None, the bytes) of any `Image`."""
    if isinstance(value, bytes | bytearray | memoryview):
        return None, bytes(value)
    if isinstance(value, str | os.PathLike):
        return None, _read(os.fspath(value), what)
    if isinstance(value, Mapping):
        media, path, data = value.get("media_type"), value.get("path"), value.get("data")
    else:  # a Frame (data, format) or an ImagePart (media_type, path | data)
        media = getattr(value, "media_type", None)
        fmt = getattr(value, "format", None)
        media = media or ({"png": "image/png", "jpeg": "image/jpeg"}.get(fmt) if fmt else None)
        path, data = getattr(value, "path", None), getattr(value, "data", None)
    if isinstance(path, str):
        return media, _read(path, what)
    if isinstance(data, str):
        try:
            return media, base64.b64decode(data, validate=True)
        except ValueError:
            raise ValueError(f"{what}: its data is not base64") from None
    if isinstance(data, bytes):
        return media, data
    raise ValueError(f"{what}: {type(value).__name__} is not an image (bytes, a path, a Frame)")


def _read(path: str, what: str) -> bytes:
    try:
        with open(path, "rb") as f:
            return f.read(MAX_IMAGE + 1)
    except OSError as exc:
        raise ValueError(f"{what}: cannot read {path}: {exc.strerror}") from None


def _sniff(data: bytes) -> str | None:
    if data[:4] == b"RIFF" and data[8:12] == b"WEBP":
        return "image/webp"
    return next((media for magic, media in _MAGIC if data.startswith(magic)), None)


def _as_text(value: object) -> str:
    if value is None or isinstance(value, str):
        return value or ""
    return json.dumps(value, default=str, ensure_ascii=False, indent=1)


def _scaled(value: float, low: float, high: float) -> float:
    if not low <= value <= high:
        raise ValueError(f"the judge's score {value:g} is outside its scale {low:g}..{high:g}")
    return (value - low) / (high - low)
