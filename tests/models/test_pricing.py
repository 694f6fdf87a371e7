"""Cost from the shipped pricing table: cached input, cache writes, long-context tiers."""

from __future__ import annotations

import datetime
import json
from importlib.resources import files

import pytest

from proctor.models import Price, Usage, cost, price_of, pricing_date

M = 1_000_000


def test_the_table_is_dated_and_every_entry_is_well_formed() -> None:
    datetime.date.fromisoformat(pricing_date())
    table = json.loads(files("proctor.models").joinpath("pricing.json").read_text())
    for name, entry in table["models"].items():
        price = price_of(name)
        assert price is not None and price.input > 0 and price.output > 0, name
        assert set(entry) <= {"input", "cached_input", "cache_write", "output", "long_context"}
    for alias, target in table["aliases"].items():
        assert price_of(alias) == price_of(target)


@pytest.mark.parametrize(
    "model, canonical",
    [
        ("gpt-4.1-mini", "gpt-4.1-mini"),
        ("gpt-4.1-mini-2025-04-14", "gpt-4.1-mini"),
        ("openai/gpt-4.1-mini", "gpt-4.1-mini"),
        ("openrouter/openai/gpt-4.1", "gpt-4.1"),
        ("openrouter-responses/anthropic/claude-sonnet-4.5", "claude-sonnet-4-5"),
        ("openrouter/anthropic/claude-opus-4.6", "claude-opus-4-6"),
        ("anthropic/claude-sonnet-4-5", "claude-sonnet-4-5"),
        ("claude-sonnet-4-5-20250929", "claude-sonnet-4-5"),
        ("claude-3-5-haiku-latest", "claude-3-5-haiku"),
        ("Claude-Opus-4-0", "claude-opus-4"),
        ("openai/gpt-4o@https://gateway.example/v1", "gpt-4o"),
    ],
)
def test_names_resolve(model: str, canonical: str) -> None:
    assert price_of(model) == price_of(canonical) is not None


@pytest.mark.parametrize("model", ["vllm/Qwen3-8B", "gpt-4.1-micro", "", "llama3"])
def test_unknown_models_cost_none(model: str) -> None:
    assert price_of(model) is None
    assert cost(model, Usage(100, 0, 0, 100)) is None


def test_openai_cached_input_is_cheaper() -> None:
    # gpt-4.1-mini: $0.40 input, $0.10 cached, $1.60 output per 1M
    usage = Usage(
        input_tokens=M, cached_input_tokens=M // 2, output_tokens=M, reasoning_tokens=M // 4
    )
    assert cost("gpt-4.1-mini", usage) == pytest.approx(0.2 + 0.05 + 1.6)


def test_anthropic_cache_reads_and_writes() -> None:
    # claude-sonnet-4-5: $3 input, $0.30 cache read, $3.75 cache write, $15 output
    usage = Usage(
        input_tokens=100_000,
        cached_input_tokens=60_000,
        cache_write_tokens=30_000,
        output_tokens=2_000,
    )
    expected = (10_000 * 3 + 60_000 * 0.3 + 30_000 * 3.75 + 2_000 * 15) / M
    assert cost("claude-sonnet-4-5", usage) == pytest.approx(expected)


def test_long_context_multiplies_every_price_above_the_threshold() -> None:
    at = Usage(input_tokens=200_000, output_tokens=1_000)
    above = Usage(input_tokens=200_001, cached_input_tokens=100_000, output_tokens=1_000)
    assert cost("claude-sonnet-4-5", at) == pytest.approx((200_000 * 3 + 1_000 * 15) / M)
    expected = (100_001 * 3 * 2 + 100_000 * 0.3 * 2 + 1_000 * 15 * 1.5) / M
    assert cost("claude-sonnet-4-5", above) == pytest.approx(expected)
    gemini = cost("gemini-2.5-pro", Usage(input_tokens=300_000, output_tokens=M))
    assert gemini == pytest.approx(300_000 * 1.25 * 2 / M + 10 * 1.5)


def test_prices_without_cache_entries_fall_back_to_input() -> None:
    price = Price(input=2.0, output=8.0)
    assert price.cost(Usage(M, M // 2, M // 4, 0)) == pytest.approx(2.0)
    assert price_of("o3-pro") == Price(input=20.0, output=80.0)


def test_gpt_5_4_long_context_tier_and_flat_claude_4_6() -> None:
    above = Usage(input_tokens=300_000, output_tokens=10_000)
    assert cost("openai/gpt-5.4", above) == pytest.approx(
        (300_000 * 2.5 * 2 + 10_000 * 15 * 1.5) / M
    )
    flat = (300_000 * 3 + 10_000 * 15) / M
    assert cost("anthropic/claude-sonnet-4-6", above) == pytest.approx(flat)
