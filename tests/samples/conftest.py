"""Fixtures for the sample tests: a fake model with vLLM token ids behind a proxy."""

from __future__ import annotations

from collections.abc import AsyncIterator

import pytest
from notes_env import NOTES, make_policy

from proctor.proxy import InterceptionProxy, Upstream
from proctor.testing import FakeModelServer


@pytest.fixture
async def proxy() -> AsyncIterator[InterceptionProxy]:
    """An interception proxy in front of the fake model playing `make_policy(NOTES)`."""
    async with (
        FakeModelServer(make_policy(NOTES)) as fake,
        InterceptionProxy(Upstream(fake.url, api_key="sk-upstream")) as p,
    ):
        yield p
