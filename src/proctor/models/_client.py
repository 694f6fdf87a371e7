"""What every provider adapter shares: the retry loop, request byte ceilings and 413
compaction, parsing, usage and cost; and what the SDK adapters share (`SdkAdapter`)."""

from __future__ import annotations

import inspect
import random
from abc import abstractmethod
from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import orjson

from .._errors import HttpConnectError, HttpReadError, HttpTimeout
from .._resource import AsyncResource
from ._clock import Clock, SystemClock
from ._context import ContextPolicy, compact, drop_frames, history_bytes
from ._names import Api, ModelSpec
from ._pricing import Price, price_of
from ._retry import HeaderLookup, Outcome, Retrier, RetryPolicy, classify_status, retry_after_from
from ._types import Message, ModelResponse, ToolSpec
from ._wire import brief, check_response, parse_response, usage_from

__all__ = [
    "REQUEST_CEILINGS",
    "ProviderAdapter",
    "Reply",
    "Request",
    "SdkAdapter",
    "adapter_options",
    "call_sdk",
    "thinking_within",
]

_COMPACT_413 = ContextPolicy()
"""How a 413 is answered when the client has no context policy: halve the history."""

_MIB = 1024 * 1024

REQUEST_CEILINGS: dict[str, int] = {
    "anthropic": 24 * _MIB,  # under the Messages API's 32 MB request limit
    "openai": 20 * _MIB,  # under the 25 MB bodies OpenAI's edge answers 413 beyond
    "openai-responses": 20 * _MIB,
    "fireworks": 8 * _MIB,
}
"""Client-side request body ceilings by provider, in bytes, below the providers' hard
limits: old images are dropped from a request over its ceiling before it is sent.
Providers not named here have none (`max_request_bytes=` sets one)."""


@dataclass(slots=True)
class Reply:
    """One HTTP response as an adapter got it from its SDK."""

    status: int
    headers: HeaderLookup | Mapping[str, str]
    content: bytes
    json: Any = None


@dataclass(frozen=True, slots=True)
class Request:
    """What one attempt sends: the chat-shaped history, the provider body made of it,
    and the body's size as JSON (which decides whether a 413 rewrite is smaller)."""

    messages: list[Message]
    body: dict[str, Any]
    nbytes: int


class ProviderAdapter(AsyncResource):
    """A `ModelClient` on one provider API, and an async context manager closing it.

    Subclasses build the provider's request body and send it through the SDK; the
    retry loop, 413 compaction, parsing, usage and cost are shared.
    """

    api: Api

    def __init_subclass__(cls, **kwargs: Any) -> None:
        # For one minor release: body() took the session key before session_params().
        super().__init_subclass__(**kwargs)
        if "session_key" in inspect.signature(cls.body).parameters:
            raise TypeError(
                f"{cls.__qualname__}.body() takes (messages, tools, params) now: a session "
                "key's fields in the body come from session_params(session_key)"
            )

    def __init__(
        self,
        model: str,
        spec: ModelSpec,
        *,
        retry: RetryPolicy | None,
        clock: Clock | None,
        rng: random.Random | None,
        context: ContextPolicy | None,
        params: Mapping[str, Any],
        max_request_bytes: int | None = None,
    ) -> None:
        self.model = model
        self.spec = spec
        self.retry = retry or RetryPolicy()
        self.clock: Clock = clock or SystemClock()
        self.context = context
        self.max_request_bytes = max_request_bytes or REQUEST_CEILINGS.get(spec.provider)
        self.params = dict(params)
        self._rng = rng
        self._price: Price | None = price_of(spec.model)

    @abstractmethod
    def body(
        self, messages: list[Message], tools: Sequence[ToolSpec], params: dict[str, Any]
    ) -> dict[str, Any]:
        """The provider request body, from the history, the tools and the call's
        parameters (the session's among them: see `session_params`), a fresh dict it may
        take from."""

    @abstractmethod
    async def send(self, body: dict[str, Any], headers: dict[str, str]) -> Reply:
        """One HTTP attempt through the SDK.

        Raises:
            HttpError: no response came back (connect, read, timeout).
        """

    def session_headers(self, session_key: str | None) -> dict[str, str]:
        """Extra headers for a session key (none unless the API takes it as a header)."""
        return {}

    def session_params(self, session_key: str) -> dict[str, Any]:
        """Request parameters for a session key (none unless the API takes it in the
        body); the call's own parameters of the same names win."""
        return {}

    async def complete(
        self,
        messages: list[Message],
        *,
        tools: Sequence[ToolSpec] = (),
        require_tool_call: bool = False,
        session_key: str | None = None,
        **params: Any,
    ) -> ModelResponse:
        """See `ModelClient.complete`."""
        if self.context is not None:
            messages = compact(messages, self.context)
            if self.context.max_frames is not None:
                messages, _ = drop_frames(messages, max_frames=self.context.max_frames)
        merged = {**self.params, **params}
        if merged.pop("stream", False):
            raise ValueError("complete() returns whole responses; stream=True is not supported")
        if session_key is not None:
            for name, value in self.session_params(session_key).items():
                merged.setdefault(name, value)
        headers = self.session_headers(session_key)

        def build(history: list[Message]) -> Request:
            body = self.body(history, tools, dict(merged))
            return Request(history, body, len(orjson.dumps(body)))

        def fit(history: list[Message], ceiling: int | None) -> Request:
            # Old images go first, as many as the excess needs: estimated from the
            # history (file sizes, nothing read), so frames that cannot fit are never
            # encoded; then measured on the body, rebuilt until under or none is left.
            if ceiling is not None and (over := history_bytes(history) - ceiling) > 0:
                history, _ = drop_frames(history, free_bytes=over)
            request = build(history)
            while ceiling is not None and request.nbytes > ceiling:
                history, dropped = drop_frames(
                    request.messages, free_bytes=request.nbytes - ceiling
                )
                if not dropped:
                    break
                request = build(history)
            return request

        async def attempt(request: Request) -> Reply:
            return await self.send(request.body, headers)

        def classify(reply: Reply) -> Outcome:
            return self._classify(reply, require_tool_call)

        def shrink(request: Request) -> Request:
            # Half the refused size: old images first, then the oldest steps. Compaction
            # may keep the message count (one long answer folded into a checkpoint);
            # the retrier sends the rewrite only if it is smaller in bytes.
            smaller = fit(request.messages, request.nbytes // 2)
            if smaller.nbytes <= request.nbytes // 2:
                return smaller
            policy = self.context or _COMPACT_413
            return build(compact(smaller.messages, policy, force=True))

        retrier = Retrier(self.retry, self.clock, self._rng)
        started = self.clock.now()
        first = fit(messages, self.max_request_bytes)
        reply = await retrier.run(attempt, first, classify, shrink=shrink)
        return self._response(reply.json, retrier, self.clock.now() - started)

    def _classify(self, reply: Reply, require_tool_call: bool) -> Outcome:
        cause = classify_status(reply.status, reply.content)
        if cause != "ok":
            return Outcome(cause, reply.status, _error_text(reply), retry_after_from(reply.headers))
        try:
            reply.json = orjson.loads(reply.content)
        except orjson.JSONDecodeError:
            return Outcome("malformed", reply.status, "response is not JSON")
        # A call to a tool that does not exist is a well-formed answer: the caller tells
        # the model so (as ToolAgent does), which works where resending would not.
        problem = check_response(self.api, reply.json, require_tool_call=require_tool_call)
        return Outcome("malformed" if problem else "ok", reply.status, problem)

    def _response(self, body: Any, retrier: Retrier, latency: float) -> ModelResponse:
        parsed = parse_response(self.api, body)
        usage = usage_from(self.api, body)
        price = self._price or price_of(str(body.get("model") or ""))
        return ModelResponse(
            message=parsed.message,
            content=parsed.content,
            tool_calls=parsed.tool_calls,
            usage=usage,
            cost=None if price is None else price.cost(usage),
            model=self.model,
            finish_reason=parsed.finish_reason,
            attempts=retrier.attempts,
            latency=latency,
            raw=body,
        )


class SdkAdapter(ProviderAdapter):
    """An adapter that sends through a provider's SDK (`openai`, `anthropic`), its client
    made with the key, timeout and headers given and without the SDK's own retries."""

    def __init__(
        self,
        model: str,
        spec: ModelSpec,
        *,
        api_key: str,
        timeout: float,
        headers: dict[str, str],
        **common: Any,
    ) -> None:
        super().__init__(model, spec, **common)
        self._sdk = self.sdk_client(
            api_key=api_key, timeout=timeout, max_retries=0, default_headers=headers
        )

    @abstractmethod
    def sdk_client(self, **options: Any) -> Any:
        """The SDK's async client for this adapter's base URL, made with `options`."""

    async def aclose(self) -> None:
        """Close the SDK client and its connections."""
        await self._sdk.close()


def adapter_options(
    retry: RetryPolicy | None,
    clock: Clock | None,
    rng: random.Random | None,
    context: ContextPolicy | None,
    params: Mapping[str, Any] | None,
    max_request_bytes: int | None,
) -> dict[str, Any]:
    """`ProviderAdapter`'s keyword arguments, as `model_client` and `aws_client` take them.

    Raises:
        ValueError: `max_request_bytes` is not positive.
    """
    if max_request_bytes is not None and max_request_bytes <= 0:
        raise ValueError(f"max_request_bytes must be > 0, not {max_request_bytes!r}")
    return {
        "max_request_bytes": max_request_bytes,
        "retry": retry,
        "clock": clock,
        "rng": rng,
        "context": context,
        "params": dict(params or {}),
    }


def thinking_within(params: dict[str, Any], ceiling: int | None, minimum: int = 0) -> None:
    """Keep a `thinking: {"budget_tokens": N}` parameter under the output ceiling.

    The budget counts toward `max_tokens`, and providers refuse a budget that is not
    below it: a larger one is cut to `ceiling - 1` (in a fresh dict).

    Raises:
        ValueError: the ceiling leaves less than `minimum` tokens to think.
    """
    thinking = params.get("thinking")
    if not isinstance(thinking, dict):
        return
    budget = thinking.get("budget_tokens")
    if ceiling is None or not isinstance(budget, int) or budget < ceiling:
        return
    if ceiling - 1 < minimum:
        raise ValueError(
            f"thinking.budget_tokens {budget} does not fit under max_tokens {ceiling}: "
            f"raise max_tokens above {minimum}"
        )
    params["thinking"] = {**thinking, "budget_tokens": ceiling - 1}


def _error_text(reply: Reply) -> str:
    """The provider's error message, briefly, else the start of the body."""
    try:
        body = orjson.loads(reply.content)
    except orjson.JSONDecodeError:
        return f"HTTP {reply.status}: {brief(reply.content.decode(errors='replace'))}"
    error = body.get("error") if isinstance(body, dict) else None
    message = error.get("message") if isinstance(error, dict) else error
    return f"HTTP {reply.status}: {brief(message if message else body)}"


async def call_sdk(
    sdk: Any,
    create: Callable[..., Awaitable[Any]],
    body: dict[str, Any],
    headers: dict[str, str],
    named: tuple[str, ...],
) -> Reply:
    """One raw-response SDK call of `body`: its `named` keys as the method's arguments,
    the rest as `extra_body`. Error statuses become replies, the rest `HttpError`s.

    `sdk` is the `openai` or `anthropic` module: both name their errors alike.
    """
    rest = {k: v for k, v in body.items() if k not in named}
    try:
        raw = await create(**{k: body[k] for k in named}, extra_body=rest, extra_headers=headers)
    except sdk.APIStatusError as exc:
        response = exc.response
        return Reply(response.status_code, response.headers, response.content)
    except sdk.APITimeoutError as exc:
        raise HttpTimeout(str(exc)) from exc
    except sdk.APIConnectionError as exc:
        import httpx2  # loaded with the SDK already

        connect = isinstance(exc.__cause__, httpx2.ConnectError)
        cls = HttpConnectError if connect else HttpReadError
        raise cls(f"{exc} ({exc.__cause__!r})") from exc
    response = raw.http_response
    return Reply(response.status_code, response.headers, response.content)
