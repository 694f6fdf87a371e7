"""Model profiles: a named, versioned pin of how one provider's model is called.

A profile fixes the model string (so the adapter and the API), the request ceiling,
the compaction rule, prompt caching, default parameters and the price. A batch names
one as its agent's model, `model = "profile:fireworks-kimi-k2-chat@1"`; everything
that takes a model string takes that. A profile never changes once published: a new
setting is a new version.

Built-in profiles ship here; more come from `register_profile`, or from TOML files
named in `PROCTOR_PROFILES` (paths separated by the OS path separator), each a table
per profile:

    [profile."kimi-fast@1"]
    model = "fireworks/accounts/fireworks/models/kimi-k2-instruct-0905"
    max_request_bytes = 8388608
    params = { max_tokens = 8192, temperature = 0.6 }
    context = { max_tokens = 200000, max_turns = 40, keep_last = 5 }
    price = { input = 0.6, output = 2.5 }
"""

from __future__ import annotations

import os
import re
import tomllib
from collections.abc import Mapping
from dataclasses import asdict, dataclass, field, fields
from pathlib import Path
from typing import Any

from ._context import ContextPolicy
from ._names import ModelSpec, parse_direct
from ._pricing import Price, price_of

__all__ = [
    "PROFILE_PREFIX",
    "ModelProfile",
    "load_profiles",
    "model_profile",
    "model_profiles",
    "parse_model",
    "register_profile",
]

PROFILE_PREFIX = "profile:"
"""How a model string names a profile: `profile:NAME@VERSION`."""

PROFILES_ENV = "PROCTOR_PROFILES"

_MIB = 1024 * 1024
_REF = re.compile(r"(?P<name>[a-z0-9][a-z0-9.-]*)@(?P<version>[1-9]\d*)")


def parse_model(spec: str) -> ModelSpec:
    """Parse `provider/model[@base_url][?api=chat|responses|messages]`.

    `openai/gpt-4.1-mini` uses Chat Completions, `openai-responses/gpt-5` (or
    `openai/gpt-5?api=responses`) the Responses API, `anthropic/claude-sonnet-4-5`
    Messages. `vllm/Qwen3-8B@http://127.0.0.1:8000/v1` points a known provider at a
    URL; any other `name/model@url` is an OpenAI-compatible server. The model part
    may contain `/` (`openrouter/openai/gpt-4.1`). `profile:NAME@VERSION` is the
    model string of that model profile.

    `bedrock/anthropic.claude-sonnet-4-5-20250929-v1:0` is Bedrock Converse in the AWS
    region of the standard configuration (`@https://...` overrides the endpoint);
    `mantle/<model>@https://host/v1` is an OpenAI-compatible server whose requests are
    signed with AWS SigV4. Neither takes an API key.

    Raises:
        ValueError: the string does not have that shape, names an unknown provider
            without a URL, or an unknown API.
    """
    if isinstance(spec, str) and spec.strip().startswith(PROFILE_PREFIX):
        return parse_model(model_profile(spec).model)  # a profile pins a model string
    return parse_direct(spec)


@dataclass(frozen=True, slots=True)
class ModelProfile:
    """How one model is called, pinned under `name@version`.

    Args:
        name: lowercase letters, digits, `.` and `-` (`fireworks-kimi-k2-chat`).
        version: from 1; a changed setting is a new version.
        model: the model string (`provider/model[@url][?api=...]`): adapter and API.
        max_request_bytes: the request body ceiling; None: the provider's default.
        context: the client compaction rule (bytes or tokens, turns, messages, the
            outcomes a checkpoint keeps); None: none before a 413.
        cache_prompt: prompt caching (Anthropic breakpoints, OpenRouter's automatic
            caching on Anthropic routes).
        server_compaction: Anthropic's server-side compaction trigger in input tokens,
            for models that support it; None: off (no request carries its header).
        params: default request parameters (`max_tokens`, `temperature`, `thinking`...).
        price: the price per 1M tokens; None: the shipped table's for the model.

    Raises:
        ValueError: a malformed name, version, model string or ceiling.
    """

    name: str
    version: int
    model: str
    max_request_bytes: int | None = None
    context: ContextPolicy | None = None
    cache_prompt: bool = True
    server_compaction: int | None = None
    params: Mapping[str, Any] = field(default_factory=dict)
    price: Price | None = None

    def __post_init__(self) -> None:
        ref = f"{self.name}@{self.version}"
        if not isinstance(self.version, int) or not _REF.fullmatch(ref):
            raise ValueError(
                f"profile {ref!r}: a name is lowercase letters, digits, '.' and '-', "
                "and a version an integer from 1"
            )
        if self.model.strip().startswith(PROFILE_PREFIX):
            raise ValueError(f"profile {ref!r}: its model is a model string, not a profile")
        try:
            parse_model(self.model)
        except ValueError as exc:
            raise ValueError(f"profile {ref!r}: {exc}") from None
        if self.max_request_bytes is not None and self.max_request_bytes <= 0:
            raise ValueError(f"profile {ref!r}: max_request_bytes must be > 0")
        if self.server_compaction is not None and parse_model(self.model).api != "messages":
            raise ValueError(f"profile {ref!r}: server_compaction is Anthropic Messages' only")

    @property
    def ref(self) -> str:
        """`name@version`."""
        return f"{self.name}@{self.version}"

    @property
    def spec(self) -> ModelSpec:
        """Where the model string points."""
        return parse_model(self.model)

    def effective_price(self) -> Price | None:
        """The profile's price, else the shipped table's for its model."""
        return self.price or price_of(self.spec.model)

    def record(self) -> dict[str, Any]:
        """The profile as plain JSON (what a batch records it ran with)."""
        spec = self.spec
        price = self.effective_price()
        return {
            "profile": self.ref,
            "model": self.model,
            "provider": spec.provider,
            "api": spec.api,
            "max_request_bytes": self.max_request_bytes,
            "context": None if self.context is None else asdict(self.context),
            "cache_prompt": self.cache_prompt,
            "server_compaction": self.server_compaction,
            "params": dict(self.params),
            "price": None if price is None else asdict(price),
        }


_BUILTIN: tuple[ModelProfile, ...] = (
    ModelProfile(
        "anthropic-claude-sonnet-4-5-messages",
        1,
        "anthropic/claude-sonnet-4-5",
        max_request_bytes=24 * _MIB,
        params={"max_tokens": 16384},
    ),
    ModelProfile(
        "anthropic-claude-opus-4-6-compaction",
        1,
        "anthropic/claude-opus-4-6",
        max_request_bytes=24 * _MIB,
        server_compaction=150_000,  # the API's documented default trigger
        params={"max_tokens": 16384},
    ),
    ModelProfile(
        "openai-gpt-5-mini-responses",
        1,
        "openai-responses/gpt-5-mini",
        max_request_bytes=20 * _MIB,
    ),
    ModelProfile(
        "fireworks-kimi-k2-chat",
        1,
        "fireworks/accounts/fireworks/models/kimi-k2-instruct-0905",
        max_request_bytes=8 * _MIB,  # base64 images stay under Fireworks' 10 MB
        context=ContextPolicy(max_tokens=200_000, max_turns=60, keep_last=5),
        params={"max_tokens": 16384},
        price=Price(input=0.6, output=2.5),  # Fireworks' serverless list price
    ),
    ModelProfile(
        "openrouter-claude-sonnet-4-5-responses",
        1,
        "openrouter-responses/anthropic/claude-sonnet-4.5",
    ),
)

_REGISTERED: dict[str, ModelProfile] = {p.ref: p for p in _BUILTIN}
_LOADED: set[str] = set()


def register_profile(profile: ModelProfile) -> None:
    """Make `profile` known by its `name@version`.

    Raises:
        ValueError: another profile already has that name and version (a published
            profile never changes: give the new one the next version).
    """
    known = _REGISTERED.get(profile.ref)
    if known is not None and known != profile:
        raise ValueError(
            f"profile {profile.ref!r} exists with other settings; publish a new version"
        )
    _REGISTERED[profile.ref] = profile


def model_profiles() -> list[ModelProfile]:
    """Every known profile (built-in, registered, and from `PROCTOR_PROFILES`)."""
    _load_env()
    return sorted(_REGISTERED.values(), key=lambda p: (p.name, p.version))


def model_profile(ref: str) -> ModelProfile:
    """The profile `name@version` (a leading `profile:` is allowed).

    Raises:
        ValueError: malformed, or no such profile (the message lists the known ones).
    """
    text = ref.strip().removeprefix(PROFILE_PREFIX)
    if not _REF.fullmatch(text):
        raise ValueError(f"not a profile reference: {ref!r}; expected profile:NAME@VERSION")
    _load_env()
    found = _REGISTERED.get(text)
    if found is None:
        known = ", ".join(p.ref for p in model_profiles())
        raise ValueError(f"unknown model profile {text!r}; known: {known}")
    return found


def load_profiles(path: str | os.PathLike[str]) -> list[ModelProfile]:
    """Register the profiles of a TOML file (see the module) and return them.

    Raises:
        ValueError: the file is unreadable, not TOML, or a profile is malformed
            (the message names the file and the profile).
    """
    where = Path(path)
    try:
        data = tomllib.loads(where.read_text())
    except (OSError, UnicodeDecodeError, tomllib.TOMLDecodeError) as exc:
        raise ValueError(f"{where}: cannot read model profiles: {exc}") from None
    table = data.get("profile")
    if not isinstance(table, dict) or set(data) != {"profile"}:
        raise ValueError(f'{where}: expected only [profile."NAME@VERSION"] tables')
    loaded = []
    for ref, entry in table.items():
        try:
            profile = _from_toml(str(ref), entry)
            register_profile(profile)
        except (TypeError, ValueError) as exc:
            raise ValueError(f"{where}: profile {ref!r}: {exc}") from None
        loaded.append(profile)
    return loaded


def _from_toml(ref: str, entry: Any) -> ModelProfile:
    match = _REF.fullmatch(ref)
    if match is None:
        raise ValueError("the key is NAME@VERSION (lowercase, version from 1)")
    if not isinstance(entry, dict):
        raise ValueError("not a table")
    allowed = {f.name for f in fields(ModelProfile)} - {"name", "version"}
    unknown = sorted(set(entry) - allowed)
    if unknown:
        raise ValueError(f"unknown keys {', '.join(unknown)}; use {', '.join(sorted(allowed))}")
    if "model" not in entry:
        raise ValueError("no model string")
    values = dict(entry)
    if values.get("context") is not None:
        values["context"] = ContextPolicy(**values["context"])
    if values.get("price") is not None:
        values["price"] = Price(**values["price"])
    return ModelProfile(name=match["name"], version=int(match["version"]), **values)


def _load_env() -> None:
    for item in os.environ.get(PROFILES_ENV, "").split(os.pathsep):
        if item and item not in _LOADED:
            load_profiles(item)
            _LOADED.add(item)
