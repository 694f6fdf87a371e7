"""The public namespace is curated: every export resolves, and `import proctor` stays light."""

import subprocess
import sys

import proctor
import proctor.agents
import proctor.channel
import proctor.engine
import proctor.env
import proctor.models
import proctor.proxy
import proctor.runtimes
import proctor.tasks
import proctor.testing


def test_every_export_resolves() -> None:
    for name in proctor.__all__:
        assert getattr(proctor, name) is not None, name
    for module in (
        proctor.agents,
        proctor.channel,
        proctor.engine,
        proctor.env,
        proctor.models,
        proctor.proxy,
        proctor.runtimes,
        proctor.tasks,
        proctor.testing,
    ):
        for name in module.__all__:
            assert hasattr(module, name), f"{module.__name__}.{name}"


def test_unknown_attribute_is_an_attribute_error() -> None:
    try:
        proctor.nope  # type: ignore[attr-defined]  # noqa: B018
    except AttributeError as exc:
        assert "nope" in str(exc)
    else:
        raise AssertionError("expected AttributeError")


def test_import_proctor_does_not_load_pydantic_or_model_sdks() -> None:
    code = (
        "import sys, proctor, proctor.env, proctor.channel, proctor.runtimes, proctor.serve;"
        "print(sorted(m for m in ('pydantic', 'openai', 'anthropic', 'ray') "
        "if m in sys.modules))"
    )
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True
    ).stdout.strip()
    assert out == "[]"


def test_agents_models_and_proxy_load_no_sdk_until_used() -> None:
    code = (
        "import sys, proctor.agents, proctor.models, proctor.proxy, proctor.testing;"
        "print(sorted(m for m in ('openai', 'anthropic', 'mcp', 'httpx', 'httpx2', 'uvicorn') "
        "if m in sys.modules))"
    )
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True
    ).stdout.strip()
    assert out == "[]"
