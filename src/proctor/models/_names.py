"""Model strings: `provider/model[@base_url][?api=...]` to a `ModelSpec`.

Two providers sign with AWS SigV4 instead of a key: `bedrock/<model id>` (Bedrock
runtime Converse, the endpoint of the AWS region unless a URL is given) and
`mantle/<model>@https://host/v1` (an OpenAI-compatible server behind SigV4).
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Literal, cast
from urllib.parse import urlsplit

__all__ = ["PROVIDERS", "Api", "ModelSpec", "parse_direct"]

Api = Literal["chat", "responses", "messages", "converse"]
Auth = Literal["key", "sigv4"]

_APIS: tuple[Api, ...] = ("chat", "responses", "messages", "converse")

ANTHROPIC_VERSION = "2023-06-01"


@dataclass(frozen=True, slots=True)
class _Provider:
    api: Api
    base_url: str
    api_key_env: str | None
    auth: Auth = "key"


PROVIDERS: dict[str, _Provider] = {
    "openai": _Provider("chat", "https://api.openai.com/v1", "OPENAI_API_KEY"),
    "openai-responses": _Provider("responses", "https://api.openai.com/v1", "OPENAI_API_KEY"),
    "anthropic": _Provider("messages", "https://api.anthropic.com", "ANTHROPIC_API_KEY"),
    "vllm": _Provider("chat", "http://127.0.0.1:8000/v1", None),
    "sglang": _Provider("chat", "http://127.0.0.1:30000/v1", None),
    "ollama": _Provider("chat", "http://127.0.0.1:11434/v1", None),
    "openrouter": _Provider("chat", "https://openrouter.ai/api/v1", "OPENROUTER_API_KEY"),
    "openrouter-responses": _Provider(
        "responses", "https://openrouter.ai/api/v1", "OPENROUTER_API_KEY"
    ),
    "fireworks": _Provider("chat", "https://api.fireworks.ai/inference/v1", "FIREWORKS_API_KEY"),
    "together": _Provider("chat", "https://api.together.xyz/v1", "TOGETHER_API_KEY"),
    "groq": _Provider("chat", "https://api.groq.com/openai/v1", "GROQ_API_KEY"),
    "deepseek": _Provider("chat", "https://api.deepseek.com/v1", "DEEPSEEK_API_KEY"),
    "gemini": _Provider(
        "chat", "https://generativelanguage.googleapis.com/v1beta/openai", "GEMINI_API_KEY"
    ),
    "bedrock": _Provider("converse", "", None, "sigv4"),
    "mantle": _Provider("chat", "", None, "sigv4"),
}
"""Known providers: their API, default base URL and API-key variable."""

_SPEC = re.compile(
    r"(?P<provider>[A-Za-z0-9][\w.-]*)/(?P<model>[^@?\s]+(?:@(?!https?://)[^@?\s]*)*)"
    r"(?:@(?P<url>https?://[^?\s]+))?(?:\?api=(?P<api>\w+))?"
)


@dataclass(frozen=True, slots=True)
class ModelSpec:
    """Where a model string points.

    Attributes:
        provider: the name before the first `/` (`openai`, `anthropic`, `vllm`, ...).
        model: the model name sent to the API.
        api: `chat` (Chat Completions), `responses` (OpenAI Responses) or `messages`
            (Anthropic Messages).
        base_url: the API root, without a trailing slash.
        api_key_env: the environment variable holding the key; None for keyless servers.
        auth: `key` (a bearer or `x-api-key` header) or `sigv4` (requests signed with
            AWS credentials: `bedrock/` and `mantle/`).
    """

    provider: str
    model: str
    api: Api
    base_url: str
    api_key_env: str | None
    auth: Auth = "key"

    def auth_headers(self, key: str | None) -> dict[str, str]:
        """The request headers that carry `key` for this API (none for a missing key,
        or for a SigV4 provider: its requests are signed instead)."""
        if self.auth == "sigv4":
            return {}
        if self.api == "messages":
            headers = {"anthropic-version": ANTHROPIC_VERSION}
            return {**headers, "x-api-key": key} if key else headers
        return {"Authorization": f"Bearer {key}"} if key else {}


def parse_direct(spec: str) -> ModelSpec:
    """Parse a model string that names its provider (not a `profile:` reference).

    `parse_model` (in `_profiles`) takes both; its docstring gives the shapes.

    Raises:
        ValueError: the string does not have that shape, names an unknown provider
            without a URL, or an unknown API.
    """
    match = _SPEC.fullmatch(spec.strip()) if isinstance(spec, str) else None
    if match is None or "://" in match["model"]:
        raise ValueError(
            f"not a model string: {spec!r}; expected provider/model[@http(s)://base_url] "
            "such as 'openai/gpt-4.1-mini' or 'vllm/Qwen3-8B@http://127.0.0.1:8000/v1'"
        )
    provider, model, url, api = match.group("provider", "model", "url", "api")
    known = PROVIDERS.get(provider.lower())
    if known is None and url is None:
        raise ValueError(
            f"unknown provider {provider!r} in {spec!r}: use one of "
            f"{', '.join(sorted(PROVIDERS))}, or give an OpenAI-compatible base URL "
            f"as {provider}/{model}@http://host:port/v1"
        )
    chosen: Api = known.api if known else "chat"
    if api is not None:
        if api not in _APIS:
            raise ValueError(f"unknown api {api!r} in {spec!r}: use one of {', '.join(_APIS)}")
        chosen = cast(Api, api)
    if url is not None and not urlsplit(url).hostname:
        raise ValueError(f"base URL without a host in {spec!r}")
    if (chosen == "converse") != (provider.lower() == "bedrock"):
        raise ValueError(f"{spec!r}: the converse API is bedrock/'s, and bedrock/ speaks only it")
    if provider.lower() == "mantle" and url is None:
        raise ValueError(
            f"{spec!r}: a mantle/ model needs its SigV4-signed endpoint, as "
            f"mantle/{model}@https://host/v1"
        )
    return ModelSpec(
        provider=provider.lower(),
        model=model,
        api=chosen,
        base_url=(url or (known.base_url if known else "")).rstrip("/"),
        api_key_env=known.api_key_env if known else None,
        auth=known.auth if known else "key",
    )
