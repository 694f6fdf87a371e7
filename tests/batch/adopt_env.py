"""The environment the container-adoption test serves in a container: `job(n)` grades
the answer `done-<n>`."""

from __future__ import annotations

from collections.abc import AsyncGenerator
from typing import Any

from proctor import Environment

env = Environment("adoptable", version="1")


@env.template
async def job(n: int) -> AsyncGenerator[Any, Any]:
    answer = yield f"job {n}: answer done-{n} once you have waited"
    yield 1.0 if answer == f"done-{n}" else 0.0
