"""Batch configs: JSON and TOML, unknown fields refused with their line, stable rollout ids."""

from __future__ import annotations

import json
import textwrap
from pathlib import Path
from typing import Any

import pytest
from plan_helpers import config, write_json

from proctor.batch._config import (
    BatchConfig,
    BatchConfigError,
    ConfigProblem,
    RayExecutorConfig,
    SandboxRuntimeConfig,
    rollout_id,
)
from proctor.batch._config_load import load_config
from proctor.batch._config_runtime import build_runtime

TOML = """\
name = "smoke"
max_concurrent = 4
expected_rollouts = 6
repeats = 2

[taskset]
source = "tasks.json"
env_source = "env.py"

[[agents]]
kind = "tool"
model = "openai/gpt-4.1-mini"
max_steps = 5

[[agents]]
kind = "command"
argv = ["python", "harness.py"]
model = "vllm/Qwen3-8B@http://127.0.0.1:8000/v1"

[runtime]
kind = "sandbox"
network = "none"
limits = { memory = "512M", processes = 64 }

[limits]
max_turns = 10
"""


def write(tmp_path: Path, name: str, text: str) -> Path:
    path = tmp_path / name
    path.write_text(textwrap.dedent(text))
    return path


def problems(path: Path) -> list[tuple[int | None, str, str]]:
    with pytest.raises(BatchConfigError) as caught:
        load_config(path)
    found = [p for p in caught.value.problems if isinstance(p, ConfigProblem)]
    assert len(found) == len(caught.value.problems)
    return [(p.line, p.path, p.message) for p in found]


def test_a_toml_config_loads_with_every_section(tmp_path: Path) -> None:
    cfg = load_config(write(tmp_path, "b.toml", TOML))
    assert cfg.name == "smoke"
    assert isinstance(cfg.runtime, SandboxRuntimeConfig)
    assert cfg.runtime.limits == {"memory": "512M", "processes": 64}
    assert cfg.limits.max_turns == 10
    assert cfg.launch_retries == 1 and cfg.durability == "default"
    assert cfg.agent_names() == ["openai/gpt-4.1-mini", "harness-vllm/Qwen3-8B"]
    assert cfg.resolve("tasks.json") == str(tmp_path / "tasks.json")


def test_assignments_are_task_by_agent_by_repeat_with_readable_ids(tmp_path: Path) -> None:
    cfg = load_config(write(tmp_path, "b.toml", TOML))
    table = cfg.assignments(["add-1", "echo/hi"])
    assert [a.rollout_id for a in table[:3]] == [
        "add-1--openai-gpt-4.1-mini--r1",
        "add-1--openai-gpt-4.1-mini--r2",
        "add-1--harness-vllm-Qwen3-8B--r1",
    ]
    assert table[-1].rollout_id == "echo-hi--harness-vllm-Qwen3-8B--r2"
    assert len({a.rollout_id for a in table}) == len(table) == 8


def test_a_long_rollout_id_is_cut_and_stays_unique() -> None:
    a, b = rollout_id("x" * 200 + "a", "agent", 1), rollout_id("x" * 200 + "b", "agent", 1)
    assert len(a) <= 120 and len(b) <= 120 and a != b
    assert rollout_id("x" * 200 + "a", "agent", 1) == a  # stable


def test_an_unknown_toml_key_is_named_with_its_line(tmp_path: Path) -> None:
    text = TOML.replace("max_steps = 5", "max_stepz = 5").replace(
        'network = "none"', 'netwrk = "none"'
    )
    found = problems(write(tmp_path, "b.toml", text))
    assert (13, "agents[0].max_stepz", "Extra inputs are not permitted") in found
    assert (22, "runtime.netwrk", "Extra inputs are not permitted") in found


def test_an_unknown_key_in_a_toml_inline_table_points_at_its_line(tmp_path: Path) -> None:
    text = TOML.replace("processes = 64", "procs = 64")
    [(line, path, message)] = problems(write(tmp_path, "b.toml", text))
    assert (line, path) == (23, "runtime.limits") and "unknown limit 'procs'" in message


def test_a_sub_table_of_an_array_of_tables_is_located(tmp_path: Path) -> None:
    text = TOML.replace(
        "max_steps = 5\n",
        "max_steps = 5\n\n[agents.params]\ntemperature = 0\n\n[agents.bogus]\nx = 1\n",
    )
    [(line, path, _)] = problems(write(tmp_path, "b.toml", text))
    assert (line, path) == (18, "agents[0].bogus")


def test_an_unknown_top_level_toml_key_is_named(tmp_path: Path) -> None:
    found = problems(write(tmp_path, "b.toml", "max_concurency = 2\n" + TOML))
    assert found == [(1, "max_concurency", "Extra inputs are not permitted")]


def test_an_unknown_json_key_is_named_with_its_line(tmp_path: Path) -> None:
    data = config(
        agents=[
            {"kind": "python", "agent": "env.py:solver"},
            {"kind": "tool", "model": "openai/gpt-4.1-mini", "max_stepz": 5},
        ],
        timeouts={"rollout": 60, "grading": 5},
    )
    path = write_json(tmp_path, data)
    lines = path.read_text().splitlines()
    found = problems(path)
    assert {(p, m) for _, p, m in found} == {
        ("agents[1].max_stepz", "Extra inputs are not permitted"),
        ("timeouts.grading", "Extra inputs are not permitted"),
    }
    for line, path_, _ in found:
        assert line is not None and path_.rsplit(".", 1)[1] in lines[line - 1]


def test_a_missing_field_points_at_its_enclosing_object(tmp_path: Path) -> None:
    data = config()
    del data["expected_rollouts"]
    data["agents"] = [{"kind": "tool"}]
    found = problems(write_json(tmp_path, data))
    assert (1, "expected_rollouts", "Field required") in found
    line = next(line for line, path, _ in found if path == "agents[0].model")
    assert line is not None
    assert '"kind": "tool"' in (tmp_path / "batch.json").read_text().splitlines()[line]


def test_a_wrong_kind_is_named(tmp_path: Path) -> None:
    found = problems(write_json(tmp_path, config(runtime={"kind": "kubernetes"})))
    assert len(found) == 1 and found[0][1] == "runtime" and "kubernetes" in found[0][2]


def test_syntax_errors_name_the_line_in_both_formats(tmp_path: Path) -> None:
    bad_json = write(tmp_path, "b.json", '{\n  "max_concurrent": 2,\n  "agents": [,]\n}\n')
    [(line, _, message)] = problems(bad_json)
    assert line == 3 and message.startswith("invalid JSON")
    bad_toml = write(tmp_path, "b.toml", 'name = "x"\nrepeats = = 2\n')
    [(line, _, message)] = problems(bad_toml)
    assert line == 2 and message.startswith("invalid TOML")


def test_error_text_reads_file_line_path_message(tmp_path: Path) -> None:
    path = write(tmp_path, "b.toml", "max_concurency = 2\n" + TOML)
    with pytest.raises(BatchConfigError) as caught:
        load_config(path)
    assert str(caught.value) == f"{path}:1: max_concurency: Extra inputs are not permitted"


def test_a_bad_model_string_is_refused_at_parse_time(tmp_path: Path) -> None:
    data = config(agents=[{"kind": "tool", "model": "gpt-4"}])
    [(_, path, message)] = problems(write_json(tmp_path, data))
    assert path == "agents[0].model" and "not a model string" in message


def test_secrets_cannot_be_written_into_a_config(tmp_path: Path) -> None:
    data = config(
        agents=[
            {
                "kind": "command",
                "argv": ["h"],
                "model": "openai/gpt-4.1",
                "env": {"OPENAI_API_KEY": "sk-x"},
            },
            {"kind": "tool", "model": "vllm/m@http://user:pw@127.0.0.1:1/v1"},
        ],
        runtime={"kind": "subprocess", "env": {"DB_PASSWORD": "x"}},
    )
    found = {path: message for _, path, message in problems(write_json(tmp_path, data))}
    assert "secrets never go in a config file" in found["agents[0].env"]
    assert "must not carry credentials" in found["agents[1].model"]
    assert "DB_PASSWORD" in found["runtime.env"]
    assert "sk-x" not in json.dumps(found) and "pw@" not in json.dumps(found)


def test_executor_ray_shorthand_and_every_runtime_kind(tmp_path: Path) -> None:
    runtimes: list[dict[str, Any]] = [
        {"kind": "local"},
        {"kind": "subprocess", "warm": 2},
        {"kind": "sandbox", "network": "host", "warm": True},
        {"kind": "container", "image": "img", "engine": "podman", "resources": {"cpus": 1}},
        {"kind": "ray", "address": "ray://h:10001", "resources": {"cpus": 1}},
        {"kind": "url", "url": "tcp://127.0.0.1:9", "token_env": "ENV_TOKEN"},
    ]
    for runtime in runtimes:
        cfg = BatchConfig.model_validate(config(runtime=runtime, executor="ray"))
        assert cfg.runtime.kind == runtime["kind"]
        assert isinstance(cfg.executor, RayExecutorConfig)


def test_the_schema_forbids_unknown_fields_everywhere() -> None:
    schema = BatchConfig.model_json_schema()
    assert schema["additionalProperties"] is False
    for name, definition in schema["$defs"].items():
        if definition.get("type") == "object" and "properties" in definition:
            assert definition.get("additionalProperties") is False, name
    kinds = {
        d["properties"]["kind"].get("const")
        for d in schema["$defs"].values()
        if "kind" in d.get("properties", {})
    }
    assert {"local", "subprocess", "sandbox", "container", "ray", "url"} <= kinds
    assert {"tool", "command", "python"} <= kinds


def test_timeouts_and_limits_become_the_engine_and_proxy_values() -> None:
    from proctor.engine import Timeouts
    from proctor.proxy import ModelLimits

    cfg = BatchConfig.model_validate(
        config(timeouts={"rollout": 60, "agent": 50}, limits={"max_turns": 4, "max_cost": 0.2})
    )
    assert cfg.timeouts.to_timeouts() == Timeouts(rollout=60, agent=50)
    assert cfg.limits.to_limits() == ModelLimits(max_turns=4, max_cost=0.2)


def test_the_digest_is_stable_and_follows_the_content(tmp_path: Path) -> None:
    a = BatchConfig.model_validate(config())
    assert a.digest() == BatchConfig.model_validate(config()).digest()
    assert a.digest() != BatchConfig.model_validate(config(repeats=2)).digest()


def test_every_runtime_kind_builds_its_provider(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from proctor import runtimes

    (tmp_path / "env.py").write_text("")
    monkeypatch.setenv("ENV_TOKEN", "t0ken-value")
    expected = {
        "local": runtimes.LocalRuntime,
        "subprocess": runtimes.SubprocessRuntime,
        "sandbox": runtimes.SandboxRuntime,
        "container": runtimes.ContainerRuntime,
        "ray": runtimes.RayRuntime,
        "url": runtimes.UrlRuntime,
    }
    rows: list[dict[str, Any]] = [
        {"kind": "local"},
        {"kind": "subprocess", "warm": 2},
        {"kind": "sandbox", "binds": ["data"], "limits": {"memory": "1G"}},
        {"kind": "container", "image": "img", "source": "/src/env.py"},
        {"kind": "ray", "address": "ray://h:10001"},
        {"kind": "url", "url": "tcp://127.0.0.1:9", "token_env": "ENV_TOKEN"},
    ]
    for runtime in rows:
        cfg = load_config(write_json(tmp_path, config(runtime=runtime)))
        provider = build_runtime(cfg, batch="b1")
        assert type(provider) is expected[runtime["kind"]], runtime
        assert "t0ken-value" not in repr(provider)


def test_a_runtime_without_a_source_or_token_is_refused(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("ENV_TOKEN", raising=False)
    cfg = load_config(write_json(tmp_path, config(taskset={"source": "tasks.json"})))
    with pytest.raises(
        BatchConfigError, match=r"taskset\.env_source: the (sandbox|subprocess) runtime needs"
    ):
        build_runtime(cfg)
    url = {"kind": "url", "url": "tcp://127.0.0.1:9", "token_env": "ENV_TOKEN"}
    cfg = load_config(write_json(tmp_path, config(runtime=url)))
    with pytest.raises(BatchConfigError, match="ENV_TOKEN is not set"):
        build_runtime(cfg)


def test_the_old_concurrency_key_is_read_and_warned_for_one_release(tmp_path: Path) -> None:
    old = config()
    old["max_concurrency"] = old.pop("max_concurrent")
    with pytest.warns(DeprecationWarning, match="name it max_concurrent"):
        cfg = load_config(write_json(tmp_path, old))
    assert cfg.max_concurrent == 2
    assert cfg.deprecated == [
        "max_concurrency is deprecated: name it max_concurrent (same meaning)"
    ]
    assert BatchConfig.model_validate(config()).deprecated == []
    both = {**config(), "max_concurrency": 3}
    with pytest.raises(BatchConfigError, match="max_concurrency is the old name of max_concurrent"):
        load_config(write_json(tmp_path, both, "both.json"))


def test_digests_recorded_before_the_rename_still_match() -> None:
    # What the runner before the rename recorded for these configs: `resume` compares it.
    assert BatchConfig.model_validate(config()).digest() == (
        "e80e70dbed0569f631c7c627e1d1dff24b4e940c809ebdf16906f2788ecf1349"
    )
    ray = BatchConfig.model_validate(config(executor={"kind": "ray"}))
    assert ray.digest() == "f51ce5dc67740953f4b8c7ec055138bfa86f246cc81da79c6b113c63ce9cd61f"


def test_a_ray_shard_concurrency_is_ignored_with_a_warning() -> None:
    with pytest.warns(DeprecationWarning, match="max_concurrent bounds the rollouts"):
        cfg = BatchConfig.model_validate(config(executor={"kind": "ray", "concurrency": 8}))
    assert cfg.deprecated and "executor.concurrency" in cfg.deprecated[0]
