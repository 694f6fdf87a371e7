"""The batch plan checks a harness's placement and needs before anything launches."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from proctor.agents import CommandAgent
from proctor.batch import BatchConfig, aexecute
from proctor.batch._plan_placement import placement_problems
from proctor.batch._setup import _agent as build_agent

EXAMPLE = Path(__file__).parents[2] / "examples" / "placement"
ROWS = [{"slug": "fix", "env": "placement", "id": "fix_typo", "args": {}}]
ENV = {"name": "placement", "capabilities": ["shell"]}


def _config(runtime: dict[str, Any], **agent: Any) -> BatchConfig:
    entry = {
        "kind": "command",
        "argv": ["{python}", "harness.py"],
        "model": "openai/gpt-4.1-mini",
        "placement": "substrate",
        "ship": ["harness.py"],
        **agent,
    }
    data = {
        "taskset": {"source": "env.py"},
        "agents": [entry],
        "runtime": runtime,
        "max_concurrent": 1,
        "expected_rollouts": 1,
    }
    config = BatchConfig.model_validate(data)
    config._path = EXAMPLE / "batch.toml"
    return config


def test_a_sandbox_or_container_hosts_a_placed_harness_and_a_local_runtime_does_not() -> None:
    sandbox = _config({"kind": "sandbox"})
    assert placement_problems(sandbox, ROWS, ENV) == []
    (problem,) = placement_problems(_config({"kind": "local"}), ROWS, ENV)
    assert "runtime 'local' cannot host a harness" in problem and "placement 'jail'" in problem
    (problem,) = placement_problems(_config({"kind": "sandbox", "warm": True}), ROWS, ENV)
    assert "warm sandbox" in problem


def test_a_compose_project_s_main_hosts_a_placed_harness_but_gives_it_no_route_out() -> None:
    assert placement_problems(_config({"kind": "compose"}), ROWS, ENV) == []
    networked = _config({"kind": "compose"}, needs={"network": True})
    (problem,) = placement_problems(networked, ROWS, ENV)
    assert "a Compose project's network is internal" in problem


def test_needs_are_checked_against_the_runtime_the_model_and_the_environment() -> None:
    needs = {
        "capabilities": ["shell", "browser"],
        "api": "anthropic-messages",
        "image": "localhost/other",
        "network": True,
    }
    problems = placement_problems(_config({"kind": "container"}, needs=needs), ROWS, ENV)
    text = "\n".join(problems)
    assert "needs a network" in text
    assert "needs image 'localhost/other'; task 'fix' runs None" in text
    assert "speaks anthropic-messages, but model 'openai/gpt-4.1-mini' is served as 'chat'" in text
    assert "needs capabilities browser; environment 'placement' declares shell" in text
    assert all(p.startswith("agent ") for p in problems)


def test_a_batch_entry_builds_a_placed_harness_with_its_shipped_file() -> None:
    config = _config({"kind": "sandbox"}, needs={"capabilities": ["shell"]})
    agent = build_agent(config, config.agents[0], "out")
    assert isinstance(agent, CommandAgent)
    assert agent.placement == "substrate"
    assert agent.ship == [EXAMPLE / "harness.py"]
    assert agent.needs.capabilities == ("shell",)


async def test_the_plan_refuses_a_batch_whose_harness_needs_what_the_tasks_lack(
    tmp_path: Path,
) -> None:
    config = tmp_path / "needs.toml"
    config.write_text(
        f"""\
name = "needs"
max_concurrent = 1
expected_rollouts = 1

[taskset]
source = "{EXAMPLE / "env.py"}"

[runtime]
kind = "subprocess"

[[agents]]
kind = "command"
name = "placed"
argv = ["{{python}}", "{EXAMPLE / "harness.py"}"]
model = "openai/gpt-4.1-mini@http://127.0.0.1:9/v1"
placement = "substrate"
needs = {{ capabilities = ["shell", "browser"] }}
"""
    )
    result = await aexecute(config, tmp_path / "out", skip_model_check=True)
    assert not result.launched and result.plan is not None
    reason = result.plan.check("substrate").reason
    assert "agent 'placed': placement 'substrate': runtime 'subprocess' cannot host" in reason
    assert not (tmp_path / "out").exists()
