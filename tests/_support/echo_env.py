"""The echo environment the tests share: `echo(text)` asks for `text` and grades 1.0
for an answer of exactly `text`, else 0.0.

`make_echo_env(name, events)` builds one that tests extend with their own templates;
with `events` it records "init", "shutdown" and each echo task's "finally" there.
`SOURCE` is this file, for runtimes that load an environment by path: its `env` is
named "echo-env".
"""

from __future__ import annotations

from collections.abc import AsyncGenerator
from pathlib import Path
from typing import Any

from proctor import Environment

SOURCE = Path(__file__)


def make_echo_env(name: str = "echo-env", events: list[str] | None = None) -> Environment:
    """An environment with the `echo` template, its hooks recording into `events`."""
    env = Environment(name)
    if events is not None:
        log = events

        @env.initialize
        def _init() -> None:
            log.append("init")

        @env.shutdown
        def _shutdown() -> None:
            log.append("shutdown")

    @env.template
    async def echo(text: str) -> AsyncGenerator[Any, Any]:
        try:
            answer = yield text
            yield 1.0 if answer == text else 0.0
        finally:
            if events is not None:
                events.append("finally")

    return env


env = make_echo_env()
echo = env.tasks["echo"]
