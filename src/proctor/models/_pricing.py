"""Cost of a response from the pricing table shipped in the package (never downloaded)."""

from __future__ import annotations

import functools
import re
from dataclasses import dataclass
from importlib.resources import files
from typing import Any

import orjson

from ._types import Usage

__all__ = ["Price", "cost", "price_of", "pricing_date"]

_SUFFIX = re.compile(r"(-\d{4}-\d{2}-\d{2}|-\d{8}|-latest)$")
_DOTTED = re.compile(r"(?<=\d)\.(?=\d)")
"""A dot between version digits, as OpenRouter names Anthropic models."""
# A Bedrock model id: an optional inference-profile region, the vendor, the vendor's
# model name, a version (`us.anthropic.claude-sonnet-4-5-20250929-v1:0`).
_BEDROCK = re.compile(
    r"(?:(?:us|eu|apac|us-gov|ca|jp|au|global)\.)?[a-z][a-z0-9]*\.(?P<name>.+?)(?:-v\d+(?::\d+)?)?"
)


@dataclass(frozen=True, slots=True)
class Price:
    """USD per 1M tokens.

    `cached_input` and `cache_write` default to the input price. Above
    `long_context_threshold` input tokens, input-side prices are multiplied by
    `long_input_multiplier` and the output price by `long_output_multiplier`.
    """

    input: float
    output: float
    cached_input: float | None = None
    cache_write: float | None = None
    long_context_threshold: int | None = None
    long_input_multiplier: float = 1.0
    long_output_multiplier: float = 1.0

    def cost(self, usage: Usage) -> float:
        """USD for `usage`."""
        long = (
            self.long_context_threshold is not None
            and usage.input_tokens > self.long_context_threshold
        )
        in_mult = self.long_input_multiplier if long else 1.0
        out_mult = self.long_output_multiplier if long else 1.0
        cached = self.input if self.cached_input is None else self.cached_input
        write = self.input if self.cache_write is None else self.cache_write
        fresh = max(0, usage.input_tokens - usage.cached_input_tokens - usage.cache_write_tokens)
        inputs = fresh * self.input + usage.cached_input_tokens * cached
        inputs += usage.cache_write_tokens * write
        return (inputs * in_mult + usage.output_tokens * self.output * out_mult) / 1e6


@functools.cache
def _table() -> dict[str, Any]:
    data: dict[str, Any] = orjson.loads(files(__package__).joinpath("pricing.json").read_bytes())
    return data


def pricing_date() -> str:
    """The date the shipped table was written (`YYYY-MM-DD`)."""
    return str(_table()["as_of"])


@functools.cache
def price_of(model: str) -> Price | None:
    """The price of a model, or None when the table does not know it.

    Accepts bare names (`gpt-4.1-mini`), dated snapshots (`claude-sonnet-4-5-20250929`,
    `gpt-4.1-mini-2025-04-14`), model strings (`anthropic/claude-sonnet-4-5`,
    `openrouter/openai/gpt-4.1`, OpenRouter's dotted `anthropic/claude-sonnet-4.5`) and
    Bedrock ids (`bedrock/anthropic.claude-sonnet-4-5-20250929-v1:0`, an inference
    profile's `us.` prefix too); a base URL after `@` is ignored.
    """
    name = model.split("@", 1)[0].rsplit("/", 1)[-1].lower()
    table = _table()
    candidates = [name, _SUFFIX.sub("", name), _DOTTED.sub("-", name)]  # claude-sonnet-4.5
    if bedrock := _BEDROCK.fullmatch(name):
        candidates += [bedrock["name"], _SUFFIX.sub("", bedrock["name"])]
    for candidate in candidates:
        candidate = table["aliases"].get(candidate, candidate)
        entry = table["models"].get(candidate)
        if entry is not None:
            return _price(entry)
    return None


def _price(entry: dict[str, Any]) -> Price:
    long = entry.get("long_context") or {}
    return Price(
        input=entry["input"],
        output=entry["output"],
        cached_input=entry.get("cached_input"),
        cache_write=entry.get("cache_write"),
        long_context_threshold=long.get("threshold"),
        long_input_multiplier=long.get("input", 1.0),
        long_output_multiplier=long.get("output", 1.0),
    )


def cost(model: str, usage: Usage) -> float | None:
    """USD for `usage` on `model`, or None for a model the table does not know."""
    price = price_of(model)
    return None if price is None else price.cost(usage)
