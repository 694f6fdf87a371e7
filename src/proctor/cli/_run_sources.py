"""Where `proctor run` and `proctor validate` get rows and environments: the taskset
source (a foreign one through `proctor.importers`), the `--runtime` value, and the
runtime it names, up for one command."""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ._common import CLIError

if TYPE_CHECKING:
    from ..env import Environment
    from ..runtimes import RuntimeLike
    from ..tasks import Taskset

__all__ = [
    "CHILDREN",
    "Where",
    "check_source",
    "imported_source",
    "is_remote",
    "load_taskset",
    "open_runtime",
    "parse_runtime",
]

CHILDREN = ("subprocess", "warm", "sandbox", "sandbox-warm")
"""The `--runtime` values that serve each rollout from a child process of the source."""


@dataclass(slots=True)
class Where:
    """Where a command's environments run: a `--runtime` value and what it serves."""

    runtime: str
    env_source: str
    env_name: str | None
    token: str | None = None
    served: Environment | None = None  # the environment a local runtime serves
    imported: RuntimeLike | None = None  # the runtime a foreign task source brings (Harbor)


def parse_runtime(text: str) -> str:
    """A `--runtime` value, checked.

    Raises:
        CLIError: not one of the runtimes `proctor run` knows.
    """
    if text == "local" or text in CHILDREN:
        return text
    if text.startswith(("tcp://", "unix://")):
        return text
    raise CLIError(
        "--runtime: expected local, subprocess, warm, sandbox, sandbox-warm, tcp://HOST:PORT "
        f"or unix:///PATH, got {text!r}"
    )


def is_remote(runtime: str) -> bool:
    """Whether `runtime` is a server already running (`tcp://`, `unix://`)."""
    return runtime.startswith(("tcp://", "unix://"))


def _is_python(source: str) -> bool:
    path = Path(source)
    return path.suffix == ".py" or path.is_dir() or not path.exists()


def imported_source(source: str, limit: int | None = None) -> Any:
    """A foreign task source (`proctor.importers.detect`: Harbor, OpenEnv, verifiers,
    Inspect) with at most `limit` rows, or None.

    Raises:
        CLIError: the source is recognized but malformed, or needs an interpreter
            that is not found (the message says how to install one).
    """
    from ..importers import detect

    try:
        return detect(source, limit=limit)
    except (ValueError, ImportError) as exc:
        raise CLIError(f"{source}: {exc}") from None


def load_taskset(source: str, imported: Any, limit: int | None) -> Taskset:
    """The rows of `source` (the foreign source's, once read), at most `limit`."""
    from ..tasks import Taskset

    if imported is None:
        return Taskset.from_file(source, limit=limit)
    return Taskset(Path(source).resolve().name, imported.rows)


def check_source(runtime: str, env_source: str) -> None:
    """Refuse an environment source the runtime cannot serve (before anything loads)."""
    if not is_remote(runtime) and not _is_python(env_source):
        raise CLIError(
            f"{env_source} is not a Python source, so it defines no environment; "
            "pass --env-source PATH.py (or --runtime tcp://HOST:PORT)"
        )
    if runtime in CHILDREN and not Path(env_source).exists():
        raise CLIError(f"{env_source}: no such file")


@contextlib.asynccontextmanager
async def open_runtime(where: Where) -> AsyncIterator[RuntimeLike]:
    """The runtime `where` names (the one a foreign task source brings, if any), up for
    as long as the block runs."""
    from ..runtimes import LocalRuntime, SubprocessRuntime, UrlRuntime

    runtime, env_source, env_name = where.runtime, where.env_source, where.env_name
    imported, served = where.imported, where.served

    if imported is not None:
        if isinstance(imported, contextlib.AbstractAsyncContextManager):
            async with imported:
                yield imported
        else:
            yield imported
    elif runtime == "local" or served is not None:
        # Entered once so the environment starts once for the command, and a failing
        # initialize hook fails here with one message instead of once per run.
        assert served is not None
        async with LocalRuntime(served) as local:
            yield local
    elif runtime == "subprocess":
        yield SubprocessRuntime(env_source, env_name=env_name)
    elif runtime == "warm":
        async with SubprocessRuntime(env_source, env_name=env_name, warm=True) as warm:
            yield warm
    elif runtime in ("sandbox", "sandbox-warm"):
        from ..runtimes import SandboxRuntime

        sandbox = SandboxRuntime(env_source, env_name=env_name, warm=runtime == "sandbox-warm")
        async with sandbox:
            yield sandbox
    else:
        yield UrlRuntime(runtime, token=where.token)  # the rows were checked on it already
