"""A token-guarded server is reachable through `UrlRuntime(url, token=)`, and only so."""

from __future__ import annotations

from collections.abc import AsyncIterator

import pytest

from _support.echo_env import echo
from proctor import Environment, EnvServer, UrlRuntime, agent_from_fn, rollout
from proctor.runtimes import Endpoint


@pytest.fixture
async def url(echo_env: Environment) -> AsyncIterator[str]:
    server = EnvServer(echo_env, token="s3cret-token")
    host, port = await server.listen("127.0.0.1", 0)
    yield f"tcp://{host}:{port}"
    await server.aclose()


async def test_the_token_reaches_the_server(url: str) -> None:
    run = await rollout(
        echo(text="hi"), agent_from_fn(lambda p: p), runtime=UrlRuntime(url, token="s3cret-token")
    )
    assert run.reward == 1.0


async def test_without_the_token_the_run_fails_connecting(url: str) -> None:
    run = await rollout(echo(text="hi"), agent_from_fn(lambda p: p), runtime=UrlRuntime(url))
    assert run.error is not None and run.error.phase == "connecting"
    assert "token" in run.error.message


def test_the_token_stays_out_of_reprs() -> None:
    assert "s3cret" not in repr(Endpoint("tcp://127.0.0.1:1", token="s3cret"))
    assert "s3cret" not in repr(UrlRuntime("tcp://127.0.0.1:1", token="s3cret"))
