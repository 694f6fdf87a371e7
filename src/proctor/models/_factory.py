"""`model_client()`: the adapter a model string (or a model profile) names, its
provider's SDK imported only then."""

from __future__ import annotations

import os
import random
from collections.abc import Mapping
from typing import Any

from .._errors import ModelError
from ._bedrock import aws_client
from ._client import ProviderAdapter, adapter_options
from ._clock import Clock
from ._context import ContextPolicy
from ._names import PROVIDERS, ModelSpec
from ._profiles import PROFILE_PREFIX, ModelProfile, model_profile, parse_model
from ._retry import RetryPolicy

__all__ = ["KEYLESS", "model_client"]

KEYLESS = "EMPTY"
"""The API key sent to servers that need none (the OpenAI SDK insists on one)."""

_OPENROUTER = ("openrouter", "openrouter-responses")


def model_client(
    spec: str,
    *,
    api_key: str | None = None,
    retry: RetryPolicy | None = None,
    clock: Clock | None = None,
    rng: random.Random | None = None,
    timeout: float = 600.0,
    headers: Mapping[str, str] | None = None,
    context: ContextPolicy | None = None,
    cache_prompt: bool = True,
    params: Mapping[str, Any] | None = None,
    max_request_bytes: int | None = None,
    server_compaction: int | None = None,
    profile: str | None = None,
) -> ProviderAdapter:
    """A `ModelClient` for a model string (see `parse_model`).

    The provider's SDK is imported here, with its own retries disabled: the retry
    contract is ours.

    Args:
        spec: `provider/model[@base_url][?api=...]`, or `profile:NAME@VERSION` (a
            model profile: its settings are the defaults of the arguments below).
        api_key: the key; default from the provider's variable (`OPENAI_API_KEY`,
            `ANTHROPIC_API_KEY`, ...). Keyless servers get a placeholder.
        retry: the retry policy.
        clock: the time source (a `FakeClock` makes retries instant in tests).
        rng: the backoff jitter's randomness.
        timeout: seconds for one HTTP attempt.
        headers: extra headers on every request.
        context: compact the history before sending when it exceeds these limits;
            a 413 is answered by compacting in any case.
        cache_prompt: mark the stable prefix with Anthropic cache breakpoints.
        params: default request parameters (`temperature`, `max_tokens`, ...).
        max_request_bytes: the request body ceiling (default: the provider's in
            `REQUEST_CEILINGS`, else none); old images are dropped from a request
            over it before it is sent.
        server_compaction: Anthropic's server-side compaction, triggered at this many
            input tokens (at least 50,000; the API's default is 150,000), for models
            that support it; None: off, and no request carries its header.
        profile: a model profile (`profile:NAME@VERSION`) whose settings apply to
            `spec` pointing elsewhere (e.g. an agent's profile model reached through
            an interception proxy).

    Raises:
        ValueError: a malformed model string, or `max_request_bytes` not positive.
        ModelError: no API key for a provider that needs one.
        ImportError: the provider's SDK is not installed (names the extra).
    """
    pinned = None
    named = spec.strip().startswith(PROFILE_PREFIX)
    if named or profile is not None:
        pinned = model_profile(spec if named else str(profile))
        context = context if context is not None else pinned.context
        cache_prompt = cache_prompt and pinned.cache_prompt
        params = {**pinned.params, **(params or {})}
        max_request_bytes = max_request_bytes or pinned.max_request_bytes
        server_compaction = server_compaction or pinned.server_compaction
    parsed = parse_model(pinned.model if named and pinned is not None else spec)
    common = adapter_options(retry, clock, rng, context, params, max_request_bytes)
    if server_compaction is not None and parsed.api != "messages":
        raise ValueError(f"server_compaction is Anthropic Messages', not {parsed.api}'s ({spec})")
    if parsed.auth == "sigv4":  # bedrock/, mantle/: signed with AWS credentials, no key
        signed = aws_client(
            pinned.model if named and pinned is not None else spec,
            retry=retry,
            clock=clock,
            rng=rng,
            timeout=timeout,
            headers=headers,
            context=context,
            cache_prompt=cache_prompt,
            params=params,
            max_request_bytes=max_request_bytes,
        )
        return _pin(signed, pinned)
    key = _api_key(parsed, api_key)
    sdk: dict[str, Any] = {"api_key": key, "timeout": timeout, "headers": dict(headers or {})}
    extra = "anthropic" if parsed.api == "messages" else "openai"
    try:
        if parsed.api == "messages":
            from ._anthropic import MessagesAdapter

            claude = MessagesAdapter(
                spec,
                parsed,
                cache_prompt=cache_prompt,
                server_compaction=server_compaction,
                **sdk,
                **common,
            )
            return _pin(claude, pinned)
        from ._openai import ChatAdapter, ResponsesAdapter
        from ._openrouter import OpenRouterResponsesAdapter
    except ImportError as exc:
        raise ImportError(f"{extra} is not installed: pip install 'proctor[{extra}]'") from exc
    if parsed.api == "responses" and parsed.provider in _OPENROUTER:
        adapter: ProviderAdapter = OpenRouterResponsesAdapter(
            spec, parsed, cache_prompt=cache_prompt, **sdk, **common
        )
    else:
        cls = ResponsesAdapter if parsed.api == "responses" else ChatAdapter
        adapter = cls(spec, parsed, **sdk, **common)
    return _pin(adapter, pinned)


def _pin(adapter: ProviderAdapter, profile: ModelProfile | None) -> ProviderAdapter:
    """The adapter, priced as its profile says."""
    if profile is not None and profile.price is not None:
        adapter._price = profile.price
    return adapter


def _api_key(spec: ModelSpec, explicit: str | None) -> str:
    if explicit:
        return explicit
    key = os.environ.get(spec.api_key_env) if spec.api_key_env else None
    if key:
        return key
    known = PROVIDERS.get(spec.provider)
    if spec.api_key_env is None or (known is not None and known.base_url != spec.base_url):
        return KEYLESS  # a local or self-hosted server
    raise ModelError(f"no API key for {spec.provider}: pass api_key= or set {spec.api_key_env}")
