"""The plan: every admission check in order, each mistake named, never a secret printed."""

from __future__ import annotations

import argparse
import json
import os
import shutil
import socket
import subprocess
import sys
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import pytest
from plan_helpers import ROWS, config, workspace, write_json

from proctor.batch import _plan_env, _plan_substrate
from proctor.batch._plan import CHECKS, Plan, aplan
from proctor.batch._plan import plan as run_plan
from proctor.cli._batch import add_batch_parser
from proctor.testing import FakeModelServer

FAKE_KEY = "sk-proj-FAKE0123456789abcdefSECRET"
RUNC = "/usr/sbin/runc"
PROBE_REPOSITORY = "localhost/proctor-plan-test"  # its own: image pruning stays in it


@pytest.fixture
async def fake() -> AsyncIterator[FakeModelServer]:
    async with FakeModelServer(models=("fake-model", "gpt-4.1-mini")) as server:
        yield server


@pytest.fixture(autouse=True)
def no_provider_keys(monkeypatch: pytest.MonkeyPatch) -> None:
    for var in ("OPENAI_API_KEY", "ANTHROPIC_API_KEY", "RAY_ADDRESS"):
        monkeypatch.delenv(var, raising=False)


async def plan_of(tmp_path: Path, data: dict[str, Any], **options: Any) -> Plan:
    workspace(tmp_path)
    return await aplan(write_json(tmp_path, data), **options)


def failed(plan: Plan) -> dict[str, str]:
    return {c.name: c.reason for c in plan.checks if not c.ok}


async def test_a_good_config_is_ok_with_its_assignment_table(
    tmp_path: Path, fake: FakeModelServer
) -> None:
    data = config(
        agents=[
            {"kind": "python", "agent": "env.py:solver"},
            {"kind": "tool", "model": f"fake/fake-model@{fake.url}", "name": "fm"},
        ],
        repeats=2,
        expected_rollouts=12,
        task_suite=["add-1-2", "add-3-4", "echo-hi"],
        environment_version="1.2.0",
    )
    plan = await plan_of(tmp_path, data)
    assert plan.ok, failed(plan)
    assert [c.name for c in plan.checks] == list(CHECKS)
    assert plan.rollouts == {"total": 12, "enabled": 12, "expected": 12}
    assert plan.projected_concurrency == 2
    assert [a.rollout_id for a in plan.assignments[:4]] == [
        "add-1-2--solver--r1",
        "add-1-2--solver--r2",
        "add-1-2--fm--r1",
        "add-1-2--fm--r2",
    ]
    assert plan.check("environment").details["loaded_in"] == "child process"
    assert plan.check("models").details["catalogs"][0]["missing"] == []
    assert plan.check("models").details["catalogs"][0]["listed"] == 2
    assert fake.requests == []  # only the catalog was read: no model call, nothing spent
    doc = json.loads(plan.to_json())
    assert doc["ok"] is True and len(doc["assignments"]) == 12


async def test_duplicate_rollout_ids_and_same_agents_are_named(tmp_path: Path) -> None:
    data = config(
        agents=[
            {"kind": "python", "agent": "env.py:solver", "name": "a"},
            {"kind": "python", "agent": "env.py:solver", "name": "b"},
            {"kind": "tool", "model": "vllm/m@http://127.0.0.1:9/v1", "name": "a"},
        ],
        expected_rollouts=9,
    )
    plan = await plan_of(tmp_path, data, skip_model_check=True)
    reason = failed(plan)["config"]
    assert "agent name 'a' is used by 2 entries" in reason
    assert "agents 'a' and 'b' are the same agent and model" in reason
    assert "rollout id 'add-1-2--a--r1' is made 2 times" in reason
    assert not plan.ok


async def test_slugs_that_clean_to_the_same_id_are_named(tmp_path: Path) -> None:
    rows = [
        {"env": "mini", "id": "echo", "args": {"text": "a"}, "slug": "echo/a"},
        {"env": "mini", "id": "echo", "args": {"text": "b"}, "slug": "echo a"},
    ]
    workspace(tmp_path, rows)
    plan = await aplan(write_json(tmp_path, config(expected_rollouts=2)))
    assert failed(plan) == {"config": "rollout id 'echo-a--solver--r1' is made 2 times"}


async def test_agents_that_cannot_run_are_named(tmp_path: Path) -> None:
    data = config(
        agents=[
            {"kind": "python", "agent": "env.py:solvr"},
            {"kind": "python", "agent": "env.py:mini", "name": "not-callable"},
            {"kind": "command", "argv": ["no-such-harness-xyz"], "model": "vllm/m", "name": "h"},
        ],
        expected_rollouts=9,
    )
    plan = await plan_of(tmp_path, data, skip_model_check=True)
    reason = failed(plan)["config"]
    assert "agent 'solvr': " in reason and "has no attribute 'solvr'" in reason
    assert "agent 'not-callable': " in reason and "is not an agent" in reason
    assert "agent 'h': command 'no-such-harness-xyz' not found" in reason


async def test_a_count_mismatch_is_named_and_allow_partial_accepts_fewer(tmp_path: Path) -> None:
    plan = await plan_of(tmp_path, config(expected_rollouts=4))
    assert failed(plan) == {
        "count": "3 enabled rollouts, expected_rollouts is 4 (--allow-partial accepts fewer)"
    }
    assert (await plan_of(tmp_path, config(expected_rollouts=4), allow_partial=True)).ok
    more = await plan_of(tmp_path, config(expected_rollouts=2), allow_partial=True)
    assert failed(more) == {"count": "3 enabled rollouts, expected_rollouts is 2"}


async def test_disabled_entries_stay_in_the_table_but_do_not_count(tmp_path: Path) -> None:
    data = config(
        agents=[
            {"kind": "python", "agent": "env.py:solver"},
            {"kind": "tool", "model": "openai/gpt-4.1", "enabled": False},
        ]
    )
    plan = await plan_of(tmp_path, data)
    assert plan.ok, failed(plan)  # a disabled entry needs no key and no catalog
    assert plan.rollouts == {"total": 6, "enabled": 3, "expected": 3}


async def test_a_task_suite_mismatch_is_named(tmp_path: Path) -> None:
    order = await plan_of(tmp_path, config(task_suite=["add-3-4", "add-1-2", "echo-hi"]))
    assert failed(order) == {
        "count": "task_suite: order differs at position 1: suite has 'add-3-4', taskset 'add-1-2'"
    }
    missing = await plan_of(tmp_path, config(task_suite=["add-1-2", "add-3-4", "echo-ho"]))
    assert failed(missing) == {"count": "task_suite: not in the taskset: 'echo-ho'"}


async def test_a_missing_credential_is_named_and_no_catalog_is_asked(tmp_path: Path) -> None:
    data = config(agents=[{"kind": "tool", "model": "openai/gpt-4.1-mini"}])
    plan = await plan_of(tmp_path, data)
    reasons = failed(plan)
    assert reasons["credentials"] == ("OPENAI_API_KEY is not set (needed by openai/gpt-4.1-mini)")
    assert "not asked: OPENAI_API_KEY is not set" in reasons["models"]
    variables = plan.check("credentials").details["variables"]
    assert variables == [
        {
            "variable": "OPENAI_API_KEY",
            "needed_by": "openai/gpt-4.1-mini",
            "required": True,
            "present": False,
        }
    ]


async def test_an_unknown_template_and_bad_args_are_named(tmp_path: Path) -> None:
    rows = [
        *ROWS[:2],
        {"env": "mini", "id": "nope", "args": {}, "slug": "nope"},
        {"env": "mini", "id": "add", "args": {"a": "one", "b": 2}, "slug": "bad-args"},
        {"env": "mini", "id": "echo", "args": {"txt": "x"}, "slug": "bad-name"},
    ]
    workspace(tmp_path, rows)
    plan = await aplan(write_json(tmp_path, config(expected_rollouts=5)))
    assert set(failed(plan)) == {"environment"}
    problems = plan.check("environment").details["row_problems"]
    assert set(problems) == {"nope", "bad-args", "bad-name"}
    assert "no template 'nope' in environment 'mini'" in problems["nope"]
    assert "argument 'a'" in problems["bad-args"]
    assert "unknown argument(s) 'txt'" in problems["bad-name"]


async def test_many_problems_are_counted_past_the_first_twenty(tmp_path: Path) -> None:
    rows = [{"env": "mini", "id": "nope", "slug": f"n{i}"} for i in range(25)]
    workspace(tmp_path, rows)
    plan = await aplan(write_json(tmp_path, config(expected_rollouts=25)))
    reason = failed(plan)["environment"]
    assert reason.count("no template 'nope'") == 20 and reason.endswith("; and 5 more")
    assert len(plan.check("environment").details["row_problems"]) == 20


async def test_a_version_mismatch_is_named(tmp_path: Path) -> None:
    plan = await plan_of(tmp_path, config(environment_version="2.0.0"))
    assert failed(plan) == {
        "environment": "environment 'mini' reports version '1.2.0', environment_version is '2.0.0'"
    }


async def test_an_environment_that_fails_to_import_is_named(tmp_path: Path) -> None:
    workspace(tmp_path)
    (tmp_path / "env.py").write_text("raise RuntimeError('boom at import')\n")
    data = config(agents=[{"kind": "tool", "model": "vllm/m@http://127.0.0.1:9/v1"}])
    plan = await aplan(write_json(tmp_path, data), skip_model_check=True)
    assert "boom at import" in failed(plan)["environment"]


@pytest.fixture
def served(tmp_path: Path) -> Iterator[str]:
    """The workspace's environment served by `proctor serve` in a child: its URL."""
    workspace(tmp_path)
    proc = subprocess.Popen(
        [sys.executable, "-m", "proctor.cli", "serve", str(tmp_path / "env.py")],
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
        text=True,
    )
    try:
        assert proc.stdout is not None
        line = proc.stdout.readline()
        assert line.startswith("PROCTOR_SERVE_PORT="), line
        yield f"tcp://127.0.0.1:{line.strip().partition('=')[2]}"
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=15)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
        assert proc.stdout is not None
        proc.stdout.close()


async def test_a_served_environment_is_asked_over_the_channel(tmp_path: Path, served: str) -> None:
    rows = [*ROWS, {"env": "mini", "id": "echo", "args": {}, "slug": "no-text"}]
    (tmp_path / "tasks.json").write_text(json.dumps(rows))
    data = config(
        taskset={"source": "tasks.json"},
        runtime={"kind": "url", "url": served},
        environment_version="1.2.0",
        expected_rollouts=4,
    )
    plan = await aplan(write_json(tmp_path, data))
    assert failed(plan) == {"environment": "task 'no-text': echo: missing argument(s) 'text'"}
    details = plan.check("environment").details
    assert details["loaded_in"] == f"the server at {served}"
    assert details["templates"] == ["add", "echo"]


async def test_an_unreachable_server_is_named(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(_plan_env, "READY_TIMEOUT", 0.5)
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        url = f"tcp://127.0.0.1:{sock.getsockname()[1]}"
    data = config(taskset={"source": "tasks.json"}, runtime={"kind": "url", "url": url})
    plan = await plan_of(tmp_path, data)
    assert set(failed(plan)) == {"environment"}
    assert failed(plan)["environment"].startswith("ConnectTimeout: ")


async def test_a_missing_taskset_fails_every_check_that_needs_its_rows(tmp_path: Path) -> None:
    data = config(taskset={"source": "nope.json"}, runtime={"kind": "url", "url": "tcp://h:1"})
    plan = await plan_of(tmp_path, data)
    reasons = failed(plan)
    assert set(reasons) == {"config", "count", "environment"}
    assert (
        reasons["config"].startswith("taskset: ") and "nope.json: no such file" in reasons["config"]
    )
    assert reasons["environment"] == "not asked: the taskset did not load"


async def test_missing_bwrap_is_named(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    empty = tmp_path / "bin"
    empty.mkdir()
    monkeypatch.setenv("PATH", str(empty))
    os.chmod(tmp_path, 0o755)  # as root, the sandbox user must be able to read the source
    plan = await plan_of(tmp_path, config(runtime={"kind": "sandbox"}))
    assert failed(plan) == {
        "substrate": "bwrap not found on PATH: install bubblewrap (apt-get install bubblewrap)"
    }


async def test_a_missing_container_image_is_named(tmp_path: Path) -> None:
    image = "localhost/proctor-plan-test-no-such-image:1"
    plan = await plan_of(tmp_path, config(runtime={"kind": "container", "image": image}))
    assert "substrate" in failed(plan)
    assert image in failed(plan)["substrate"]
    assert plan.check("substrate").details["images"] == {image: False}


def test_a_container_runtime_loads_the_environment_in_a_probe_container(tmp_path: Path) -> None:
    if shutil.which("podman") is None:
        pytest.skip("podman is not installed")
    from proctor.runtimes._image import python_image

    workspace(tmp_path)
    image = python_image(engine="podman", paths=[tmp_path], repository=PROBE_REPOSITORY)
    runtime = {"kind": "container", "image": image, "source": str(tmp_path / "env.py")}
    if os.path.exists(RUNC):
        runtime["oci_runtime"] = RUNC  # crun fails on these hosts' cgroups
    data = config(taskset={"source": "tasks.json"}, runtime=runtime, environment_version="1.2.0")
    plan = run_plan(write_json(tmp_path, data))
    assert plan.ok, failed(plan)
    assert plan.check("environment").details["loaded_in"] == "a probe container (removed after)"
    assert plan.check("substrate").details["images"] == {image: True}
    batch = f"proctor.batch=plan-{plan.config_digest[:12]}"  # type: ignore[index]
    argv = ["podman", "ps", "-a", "-q", f"--filter=label={batch}"]
    assert subprocess.run(argv, capture_output=True, text=True, check=True).stdout == ""


async def test_a_wave_larger_than_memory_is_refused(tmp_path: Path) -> None:
    data = config(
        runtime={"kind": "container", "image": "img", "resources": {"memory": "64t"}},
        max_concurrent=3,
    )
    plan = await plan_of(tmp_path, data)
    assert "a wave of 3 rollouts needs about" in failed(plan)["substrate"]


async def test_a_ray_cluster_must_have_room_for_one_wave(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    asked: list[str] = []

    async def ask_ray(address: str) -> dict[str, Any]:
        asked.append(address)
        return {"available": {"CPU": 4.0, "memory": 8e9, "gpu_box": 1.0}, "nodes": 2}

    async def reachable(address: str) -> None:
        return None

    monkeypatch.setattr(_plan_substrate, "_ask_ray", ask_ray)
    monkeypatch.setattr(_plan_substrate, "_reach", reachable)
    rows = [{**row, "runtime_config": {"resources": {"gpu_box": 1}}} for row in ROWS[:1]]
    workspace(tmp_path, [*rows, *ROWS[1:]])
    runtime = {"kind": "ray", "address": "10.0.0.1:6379", "resources": {"cpus": 2}}
    plan = await aplan(write_json(tmp_path, config(runtime=runtime, max_concurrent=3)))
    assert asked == ["10.0.0.1:6379"]
    assert failed(plan) == {
        "substrate": "Ray has 4 CPU free, a wave of 3 needs 6; "
        "Ray has 1 gpu_box free, a wave of 3 needs 3"
    }
    assert plan.check("substrate").details["ray"]["needed"] == {"CPU": 6.0, "gpu_box": 3.0}
    fits = await aplan(write_json(tmp_path, config(runtime=runtime, max_concurrent=1), "b.json"))
    assert fits.ok, failed(fits)


async def test_an_unreachable_ray_cluster_is_named(tmp_path: Path) -> None:
    data = config(executor={"kind": "ray", "address": "127.0.0.1:9"})
    plan = await plan_of(tmp_path, data)
    reason = failed(plan)["substrate"]
    assert "Ray" in reason and "127.0.0.1:9" in reason


async def test_an_unknown_model_id_at_the_catalog_is_named(
    tmp_path: Path, fake: FakeModelServer
) -> None:
    data = config(agents=[{"kind": "tool", "model": f"fake/fake-modle@{fake.url}"}])
    plan = await plan_of(tmp_path, data)
    assert failed(plan) == {
        "models": f"model 'fake-modle' is not in the catalog at {fake.url}/models"
    }
    assert (await plan_of(tmp_path, data, skip_model_check=True)).ok


async def test_an_anthropic_catalog_is_read_with_its_own_headers(
    tmp_path: Path, fake: FakeModelServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("ANTHROPIC_API_KEY", FAKE_KEY)
    data = config(
        agents=[
            {"kind": "tool", "model": f"anthropic/fake-model@{fake.origin}"},
            {"kind": "tool", "model": f"anthropic/claude-nope@{fake.origin}"},
        ],
        expected_rollouts=6,
    )
    plan = await plan_of(tmp_path, data)
    assert failed(plan) == {
        "models": f"model 'claude-nope' is not in the catalog at {fake.origin}/v1/models"
    }
    assert FAKE_KEY not in plan.to_json()


async def test_an_unpriced_model_with_a_cost_cap_is_named(
    tmp_path: Path, fake: FakeModelServer
) -> None:
    data = config(agents=[{"kind": "tool", "model": f"fake/fake-model@{fake.url}"}])
    assert (await plan_of(tmp_path, data)).ok
    plan = await plan_of(tmp_path, {**data, "cost_cap": 5.0})
    assert failed(plan) == {
        "pricing": f"no price for 'fake/fake-model@{fake.url}', so cost_cap cannot be enforced"
    }


async def test_the_worst_case_cost_is_projected_from_limits(
    tmp_path: Path, fake: FakeModelServer
) -> None:
    model = f"openai/gpt-4.1-mini@{fake.url}"
    data = config(
        agents=[{"kind": "tool", "model": model}],
        limits={"max_input_tokens": 1_000_000, "max_output_tokens": 100_000, "max_cost": 0.5},
        cost_cap=10.0,
    )
    plan = await plan_of(tmp_path, data)
    assert plan.ok, failed(plan)
    from proctor.models import price_of

    price = price_of("gpt-4.1-mini")
    assert price is not None
    per = min(
        0.5, (1_000_000 * max(price.input, price.cache_write or 0) + 100_000 * price.output) / 1e6
    )
    assert plan.projected_cost_usd == pytest.approx(3 * per)
    assert plan.check("pricing").details["projection_exceeds_cap"] is False


async def test_the_plan_never_contains_a_credential_value(
    tmp_path: Path, fake: FakeModelServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("OPENAI_API_KEY", FAKE_KEY)
    data = config(
        agents=[
            {"kind": "tool", "model": f"openai/gpt-4.1-mini@{fake.url}"},
            {"kind": "command", "argv": ["true"], "model": f"openai/gpt-4.1-mini@{fake.url}"},
            {"kind": "tool", "model": f"openai/gpt-4o@{fake.url}"},
        ],
        expected_rollouts=9,
    )
    plan = await plan_of(tmp_path, data)
    assert plan.check("models").details["catalogs"][0]["listed"] == 2  # asked with the key
    text = plan.to_json()
    assert FAKE_KEY not in text and FAKE_KEY[8:20] not in text
    assert "OPENAI_API_KEY" in text
    assert failed(plan) == {"models": f"model 'gpt-4o' is not in the catalog at {fake.url}/models"}


async def test_a_secret_echoed_by_an_environment_is_redacted(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("MY_SERVICE_TOKEN", FAKE_KEY)
    workspace(tmp_path)
    (tmp_path / "env.py").write_text(
        "import os\nraise RuntimeError('token ' + os.environ['MY_SERVICE_TOKEN'])\n"
    )
    plan = await aplan(write_json(tmp_path, config()))
    assert "[redacted]" in failed(plan)["environment"]
    assert FAKE_KEY not in plan.to_json()


async def test_a_config_that_does_not_parse_gives_a_failed_plan_naming_the_line(
    tmp_path: Path,
) -> None:
    data = config(max_concurency=3)
    plan = await plan_of(tmp_path, data)
    assert not plan.ok
    first = plan.check("config")
    lines = (tmp_path / "batch.json").read_text().splitlines()
    assert "max_concurency" in lines[first.details["problems"][0]["line"] - 1]
    assert "max_concurency: Extra inputs are not permitted" in first.reason
    assert [c.reason for c in plan.checks[1:]] == ["not run: the config did not parse"] * 6


async def test_checks_after_a_failed_one_still_run(tmp_path: Path) -> None:
    data = config(
        expected_rollouts=7,
        environment_version="9",
        agents=[{"kind": "tool", "model": "openai/gpt-4.1-mini"}],
        cost_cap=1.0,
    )
    plan = await plan_of(tmp_path, data)
    assert set(failed(plan)) == {"count", "credentials", "environment", "models"}


# -- the command ------------------------------------------------------------------------


def parse(*argv: str) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="proctor")
    add_batch_parser(parser.add_subparsers(dest="command"))
    return parser.parse_args(["batch", *argv])


def test_the_command_prints_one_json_plan_and_exits_by_it(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    workspace(tmp_path)
    good = write_json(tmp_path, config())
    args = parse(str(good), "--skip-model-check")
    assert args.handler(args) == 0
    out = capsys.readouterr()
    assert json.loads(out.out)["ok"] is True
    bad = write_json(tmp_path, config(expected_rollouts=1), "bad.json")
    args = parse(str(bad))
    assert args.handler(args) == 1
    out = capsys.readouterr()
    assert json.loads(out.out)["ok"] is False
    assert out.err.splitlines()[0] == "plan: not ok (count)"
    assert out.err.splitlines()[1].startswith("count: ")  # the reason, on stderr too


def test_a_missing_config_file_is_a_failed_plan(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    args = parse(str(tmp_path / "nope.toml"), "--json")
    assert args.handler(args) == 1
    plan = json.loads(capsys.readouterr().out)
    assert plan["checks"][0]["reason"] == f"{tmp_path / 'nope.toml'}: No such file or directory"


def test_the_command_prints_the_schema(capsys: pytest.CaptureFixture[str]) -> None:
    args = parse("schema")
    assert args.handler(args) == 0
    schema = json.loads(capsys.readouterr().out)
    assert schema["title"] == "BatchConfig" and "max_concurrent" in schema["required"]


# -- the examples -----------------------------------------------------------------------

EXAMPLES = Path(__file__).resolve().parents[2] / "examples" / "batch"


async def test_the_offline_example_plans_ok() -> None:
    plan = await aplan(EXAMPLES / "letters.toml")
    assert plan.ok, failed(plan)
    assert plan.rollouts == {"total": 24, "enabled": 24, "expected": 24}
    assert plan.projected_cost_usd == 0.0


async def test_the_fake_model_example_plans_ok_against_a_fake_server() -> None:
    try:
        server = FakeModelServer(port=8765)
        await server.start()
    except OSError:
        pytest.skip("port 8765 is taken")
    try:
        plan = await aplan(EXAMPLES / "fake-model.json")
    finally:
        await server.aclose()
    assert plan.ok, failed(plan)
    assert plan.projected_concurrency == 4


async def test_the_plan_names_the_new_key_of_an_old_one(tmp_path: Path) -> None:
    workspace(tmp_path)
    old = config()
    old["max_concurrency"] = old.pop("max_concurrent")
    with pytest.warns(DeprecationWarning):
        plan = await aplan(write_json(tmp_path, old))
    assert plan.ok, failed(plan)
    assert plan.check("config").details["deprecated"] == [
        "max_concurrency is deprecated: name it max_concurrent (same meaning)"
    ]


async def test_the_plan_says_what_outlives_a_runner_that_dies(tmp_path: Path) -> None:
    """The substrate check's `lease`: the grace the servers get, or why there is none."""
    plan = await plan_of(tmp_path, config())
    assert plan.check("substrate").details["lease"] == {
        "seconds": 30.0,
        "why": "the lease supervisor holds the servers",
    }
    plan = await plan_of(tmp_path, config(runtime={"kind": "subprocess", "lease": 0}))
    assert plan.check("substrate").details["lease"] == {
        "seconds": None,
        "why": "runtime.lease = 0",
    }
    plan = await plan_of(tmp_path, config(runtime={"kind": "local", "trusted": True}))
    assert plan.check("substrate").details["lease"]["seconds"] is None
    assert "nothing outlives it" in plan.check("substrate").details["lease"]["why"]
