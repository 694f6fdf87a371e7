"""Model strings: `parse_model` and `ModelSpec.auth_headers`."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from proctor.models import ModelSpec, parse_model


@pytest.mark.parametrize(
    "spec, expected",
    [
        (
            "openai/gpt-4.1-mini",
            ("openai", "gpt-4.1-mini", "chat", "https://api.openai.com/v1", "OPENAI_API_KEY"),
        ),
        (
            "openai-responses/gpt-5",
            (
                "openai-responses",
                "gpt-5",
                "responses",
                "https://api.openai.com/v1",
                "OPENAI_API_KEY",
            ),
        ),
        (
            "openai/gpt-5?api=responses",
            ("openai", "gpt-5", "responses", "https://api.openai.com/v1", "OPENAI_API_KEY"),
        ),
        (
            "anthropic/claude-sonnet-4-5",
            (
                "anthropic",
                "claude-sonnet-4-5",
                "messages",
                "https://api.anthropic.com",
                "ANTHROPIC_API_KEY",
            ),
        ),
        (
            "vllm/Qwen3-8B@http://127.0.0.1:8000/v1",
            ("vllm", "Qwen3-8B", "chat", "http://127.0.0.1:8000/v1", None),
        ),
        ("vllm/Qwen/Qwen3-8B", ("vllm", "Qwen/Qwen3-8B", "chat", "http://127.0.0.1:8000/v1", None)),
        (
            "sglang/meta-llama/Llama-3.1-8B@http://gpu:30000/v1/",
            ("sglang", "meta-llama/Llama-3.1-8B", "chat", "http://gpu:30000/v1", None),
        ),
        ("ollama/llama3", ("ollama", "llama3", "chat", "http://127.0.0.1:11434/v1", None)),
        (
            "openrouter/anthropic/claude-3.7-sonnet",
            (
                "openrouter",
                "anthropic/claude-3.7-sonnet",
                "chat",
                "https://openrouter.ai/api/v1",
                "OPENROUTER_API_KEY",
            ),
        ),
        (
            "fireworks/accounts/fireworks/models/llama-v3p1-8b-instruct",
            (
                "fireworks",
                "accounts/fireworks/models/llama-v3p1-8b-instruct",
                "chat",
                "https://api.fireworks.ai/inference/v1",
                "FIREWORKS_API_KEY",
            ),
        ),
        (
            "mybox/some-model@https://llm.example.com/v1",
            ("mybox", "some-model", "chat", "https://llm.example.com/v1", None),
        ),
        (
            "anthropic/claude-haiku-4-5@http://127.0.0.1:9000",
            (
                "anthropic",
                "claude-haiku-4-5",
                "messages",
                "http://127.0.0.1:9000",
                "ANTHROPIC_API_KEY",
            ),
        ),
        (
            "local/m@http://127.0.0.1:1/v1?api=messages",
            ("local", "m", "messages", "http://127.0.0.1:1/v1", None),
        ),
        (
            "OpenAI/gpt-4o",
            ("openai", "gpt-4o", "chat", "https://api.openai.com/v1", "OPENAI_API_KEY"),
        ),
        ("vllm/model@v2@http://h:1/v1", ("vllm", "model@v2", "chat", "http://h:1/v1", None)),
    ],
)
def test_parse_model(spec: str, expected: tuple[str, str, str, str, str | None]) -> None:
    assert parse_model(spec) == ModelSpec(*expected)  # type: ignore[arg-type]


@pytest.mark.parametrize(
    "spec, message",
    [
        ("", "not a model string"),
        ("gpt-4.1", "not a model string"),
        ("openai/", "not a model string"),
        ("/gpt-4", "not a model string"),
        ("openai/gpt 4", "not a model string"),
        ("vllm/m@ftp://host/v1", "not a model string"),
        ("nope/model", "unknown provider 'nope'"),
        ("openai/gpt-5?api=completions", "unknown api 'completions'"),
        ("x/m@http://", "not a model string"),
        ("x/m@http://:80/v1", "without a host"),
    ],
)
def test_garbage_is_a_clear_value_error(spec: str, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        parse_model(spec)


def test_non_string_is_a_value_error() -> None:
    with pytest.raises(ValueError, match="not a model string"):
        parse_model(42)  # type: ignore[arg-type]


@given(st.text(max_size=60))
def test_parse_model_only_ever_raises_value_error(spec: str) -> None:
    try:
        parsed = parse_model(spec)
    except ValueError:
        return
    assert parsed.model and parsed.api in ("chat", "responses", "messages")
    assert parsed.base_url.startswith(("http://", "https://"))


def test_auth_headers() -> None:
    assert parse_model("openai/gpt-4o").auth_headers("sk-1") == {"Authorization": "Bearer sk-1"}
    assert parse_model("vllm/m").auth_headers(None) == {}
    headers = parse_model("anthropic/claude-haiku-4-5").auth_headers("k")
    assert headers == {"anthropic-version": "2023-06-01", "x-api-key": "k"}
    assert parse_model("anthropic/claude-haiku-4-5").auth_headers(None) == {
        "anthropic-version": "2023-06-01"
    }
