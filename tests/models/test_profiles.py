"""Model profiles: the built-in table, user profiles (registered or from TOML), and a
client made from `profile:NAME@VERSION` against the local fake."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import orjson
import pytest

from proctor.models import (
    ContextPolicy,
    ModelProfile,
    Price,
    _profiles,
    load_profiles,
    model_client,
    model_profile,
    model_profiles,
    parse_model,
    register_profile,
)
from proctor.testing import FakeModelServer, Reply

TASK: list[dict[str, Any]] = [{"role": "user", "content": "List files."}]


@pytest.fixture(autouse=True)
def registry(monkeypatch: pytest.MonkeyPatch) -> None:
    """Each test registers into its own copy of the table."""
    monkeypatch.setattr(_profiles, "_REGISTERED", dict(_profiles._REGISTERED))
    monkeypatch.setattr(_profiles, "_LOADED", set())
    monkeypatch.delenv("PROCTOR_PROFILES", raising=False)


def test_the_built_in_table_pins_each_providers_settings() -> None:
    kimi = model_profile("profile:fireworks-kimi-k2-chat@1")
    assert kimi.spec.provider == "fireworks" and kimi.spec.api == "chat"
    assert kimi.max_request_bytes == 8 * 1024 * 1024 and kimi.context is not None
    refs = [p.ref for p in model_profiles()]
    assert "anthropic-claude-sonnet-4-5-messages@1" in refs
    assert "openrouter-claude-sonnet-4-5-responses@1" in refs
    record = kimi.record()
    assert orjson.loads(orjson.dumps(record)) == record
    assert record["profile"] == "fireworks-kimi-k2-chat@1" and record["price"]["input"] == 0.6
    assert parse_model("profile:fireworks-kimi-k2-chat@1") == kimi.spec


@pytest.mark.parametrize(
    "ref, message",
    [
        ("profile:fireworks-kimi-k2-chat", "expected profile:NAME@VERSION"),
        ("profile:Kimi@1", "expected profile:NAME@VERSION"),
        ("profile:nobody@3", "unknown model profile 'nobody@3'; known: anthropic-"),
    ],
)
def test_a_bad_reference_says_what_is_known(ref: str, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        model_profile(ref)
    with pytest.raises(ValueError, match=message):
        parse_model(ref)


def test_a_published_profile_never_changes() -> None:
    first = ModelProfile("mine", 1, "openai/gpt-4.1-mini")
    register_profile(first)
    register_profile(ModelProfile("mine", 1, "openai/gpt-4.1-mini"))  # the same: fine
    with pytest.raises(ValueError, match="'mine@1' exists with other settings"):
        register_profile(ModelProfile("mine", 1, "openai/gpt-4.1"))
    register_profile(ModelProfile("mine", 2, "openai/gpt-4.1"))
    assert model_profile("mine@1") == first


@pytest.mark.parametrize(
    "kwargs, message",
    [
        ({"name": "Big", "version": 1, "model": "openai/x"}, "a name is lowercase"),
        ({"name": "x", "version": 0, "model": "openai/x"}, "a version an integer from 1"),
        ({"name": "x", "version": 1, "model": "nowhere/x"}, "'x@1': unknown provider"),
        ({"name": "x", "version": 1, "model": "profile:y@1"}, "not a profile"),
        (
            {"name": "x", "version": 1, "model": "openai/x", "max_request_bytes": 0},
            "max_request_bytes must be > 0",
        ),
    ],
)
def test_a_malformed_profile_is_refused(kwargs: dict[str, Any], message: str) -> None:
    with pytest.raises(ValueError, match=message):
        ModelProfile(**kwargs)


async def test_a_client_from_a_profile_takes_its_settings(fake: FakeModelServer) -> None:
    fake_url = fake.url
    register_profile(
        ModelProfile(
            "local-chat",
            1,
            f"vllm/fake-model@{fake_url}",
            max_request_bytes=4096,
            context=ContextPolicy(max_turns=4, keep_last=2),
            params={"max_tokens": 77, "temperature": 0.2},
            price=Price(input=1.0, output=2.0),
        )
    )
    async with model_client("profile:local-chat@1", params={"temperature": 0.9}) as client:
        assert client.max_request_bytes == 4096 and client.context is not None
        response = await client.complete(TASK)
    sent = fake.requests[0].json
    assert sent["max_tokens"] == 77 and sent["temperature"] == 0.9  # the caller's wins
    assert response.model == "profile:local-chat@1"
    usage = response.usage
    assert response.cost == pytest.approx((usage.input_tokens + 2 * usage.output_tokens) / 1e6)


def test_profiles_load_from_toml_files_named_in_the_environment(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    good = tmp_path / "profiles.toml"
    good.write_text(
        '[profile."kimi-fast@2"]\n'
        'model = "fireworks/accounts/fireworks/models/kimi-k2-instruct-0905"\n'
        "max_request_bytes = 8388608\n"
        "params = { max_tokens = 8192 }\n"
        "context = { max_tokens = 200000, max_turns = 40, keep_last = 5 }\n"
        "price = { input = 0.6, output = 2.5 }\n"
    )
    monkeypatch.setenv("PROCTOR_PROFILES", str(good))
    kimi = model_profile("profile:kimi-fast@2")
    assert kimi.context == ContextPolicy(max_tokens=200_000, max_turns=40, keep_last=5)
    assert kimi.price == Price(input=0.6, output=2.5) and kimi.params == {"max_tokens": 8192}


@pytest.mark.parametrize(
    "text, message",
    [
        ('[profile."k@1"]\nmodel = "openai/x"\nspeed = 3\n', "profile 'k@1': unknown keys speed"),
        ('[profile."k@1"]\nmax_request_bytes = 3\n', "profile 'k@1': no model string"),
        ('[profile."K"]\nmodel = "openai/x"\n', "profile 'K': the key is NAME@VERSION"),
        ('[profile."k@1"]\nmodel = "openai/x"\ncontext = { keep = 1 }\n', "profile 'k@1': "),
        ("[models]\n", r"expected only \[profile"),
        ("model = \n", "cannot read model profiles"),
    ],
)
def test_a_bad_profiles_file_names_the_file_and_the_profile(
    tmp_path: Path, text: str, message: str
) -> None:
    path = tmp_path / "p.toml"
    path.write_text(text)
    with pytest.raises(ValueError, match=f"{path}: .*{message}" if "'" in message else message):
        load_profiles(path)


async def test_a_profiles_anthropic_params_and_ceiling_reach_the_request(
    fake: FakeModelServer, replies: list[Reply | str]
) -> None:
    register_profile(
        ModelProfile(
            "local-claude",
            1,
            f"anthropic/claude-sonnet-4-5@{fake.origin}",
            cache_prompt=False,
            params={"max_tokens": 4096, "thinking": {"type": "enabled", "budget_tokens": 8000}},
        )
    )
    async with model_client("profile:local-claude@1") as client:
        await client.complete(TASK)
    sent = fake.requests[0].json
    assert sent["thinking"]["budget_tokens"] == 4095
    assert "cache_control" not in orjson.dumps(sent).decode()


async def test_a_profile_applies_to_a_model_string_pointing_elsewhere(
    fake: FakeModelServer,
) -> None:
    register_profile(
        ModelProfile(
            "remote-chat",
            1,
            "fireworks/accounts/fireworks/models/kimi-k2-instruct-0905",
            params={"max_tokens": 55},
            price=Price(input=1.0, output=1.0),
        )
    )
    proxied = f"openai/accounts/fireworks/models/kimi-k2-instruct-0905@{fake.url}?api=chat"
    async with model_client(proxied, api_key="s", profile="profile:remote-chat@1") as client:
        response = await client.complete(TASK)
    assert fake.requests[0].json["max_tokens"] == 55
    assert response.cost == pytest.approx(response.usage.total_tokens / 1e6)
