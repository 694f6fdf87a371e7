"""Fixtures every test folder shares: the echo environment and a fake model server.

What tests import by name (the echo environment's module, for module-level rows and
for runtimes that load it by path) lives in `_support`; no test imports a conftest.
"""

from __future__ import annotations

import os
from collections.abc import AsyncIterator
from typing import TYPE_CHECKING

import pytest
from hypothesis import settings

from _support import slow
from _support.echo_env import make_echo_env
from proctor import Environment
from proctor.testing import FakeModelServer, FakeRequest, Reply
from proctor.testing._fake_model import echo

if TYPE_CHECKING:
    import anthropic
    import openai

# A test that leaves a process running fails (and the process is killed).
pytest_plugins = ["_support.leak_check"]

Replies = list[Reply | str]

# No per-example deadline: the machines are shared, and a time limit in a unit test fails
# on load, not on a bug (test_random_rows_round_trip_exactly did, at 200 ms).
settings.register_profile("proctor", deadline=None)
settings.load_profile("proctor")


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Mark the slowest tests `slow` (listed in `_support/slow.py`)."""
    slow.mark(items, os.path.relpath(os.path.dirname(__file__), config.rootpath))


@pytest.fixture(autouse=True, scope="session")
def _runs_dir(tmp_path_factory: pytest.TempPathFactory) -> None:
    """`proctor run` records by default under ./proctor-runs: tests record elsewhere."""
    os.environ["PROCTOR_RUNS_DIR"] = str(tmp_path_factory.mktemp("proctor-runs"))


@pytest.fixture
def events() -> list[str]:
    """What `echo_env`'s hooks and tasks recorded: "init", "finally", "shutdown"."""
    return []


@pytest.fixture
def echo_env(events: list[str]) -> Environment:
    """A fresh echo environment ("echo-env"), recording into `events`."""
    return make_echo_env(events=events)


@pytest.fixture
def replies() -> Replies:
    """What `fake` answers, in turn; once they run out it echoes (its default policy)."""
    return []


@pytest.fixture
async def fake(replies: Replies) -> AsyncIterator[FakeModelServer]:
    """A `FakeModelServer` on loopback answering `replies`, closed after the test."""

    def policy(request: FakeRequest) -> Reply | str:
        return replies.pop(0) if replies else echo(request)

    async with FakeModelServer(policy) as server:
        yield server


@pytest.fixture
async def oai(fake: FakeModelServer) -> AsyncIterator[openai.AsyncOpenAI]:
    """An OpenAI SDK client of `fake`, without retries."""
    import openai

    async with openai.AsyncOpenAI(base_url=fake.url, api_key="x", max_retries=0) as client:
        yield client


@pytest.fixture
async def ant(fake: FakeModelServer) -> AsyncIterator[anthropic.AsyncAnthropic]:
    """An Anthropic SDK client of `fake`, without retries."""
    import anthropic

    async with anthropic.AsyncAnthropic(base_url=fake.origin, api_key="x", max_retries=0) as client:
        yield client
