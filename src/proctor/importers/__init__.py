"""Importers: task sources of other frameworks as proctor rows, graded their own way.

- Harbor / Terminal-Bench task directories: `harbor_tasks` (rows), `HarborRuntime`
  (each row in a container of its task's image, tests run there after the agent).
- verifiers environment packages (0.4.0 tasksets): `verifiers_source` (rows, and a
  runtime serving them in verifiers' own interpreter, graded by the tasks' rewards).
- Inspect AI task files: `inspect_source` (each `@task`'s samples as rows, graded by its
  scorers in Inspect's own interpreter).
- OpenEnv environments: `openenv_environment` (an OpenEnv server behind `reset` and
  `step` MCP tools, graded by the rewards it returns).

`detect(path)` recognizes any of them and returns a `Source` (rows, environment,
runtime) for `Taskset.from_file` and `proctor run`. Heavy dependencies load lazily.
"""

from __future__ import annotations

from .._public import lazy_exports

TYPE_CHECKING = False  # typing's constant, without importing typing (mypy reads it so)

__all__ = [
    "HarborRuntime",
    "OpenEnvServer",
    "OpenEnvSession",
    "Source",
    "detect",
    "harbor_source",
    "harbor_tasks",
    "inspect_source",
    "openenv_environment",
    "openenv_source",
    "verifiers_source",
]
_EXPORTS = {
    "HarborRuntime": "._harbor_runtime",
    "OpenEnvServer": "._openenv_session",
    "OpenEnvSession": "._openenv_session",
    "Source": "._source",
    "detect": "._detect",
    "harbor_source": "._detect",
    "harbor_tasks": "._harbor",
    "inspect_source": "._inspect_source",
    "openenv_environment": "._openenv",
    "openenv_source": "._openenv",
    "verifiers_source": "._verifiers_source",
}

if TYPE_CHECKING:
    from ._detect import detect, harbor_source
    from ._harbor import harbor_tasks
    from ._harbor_runtime import HarborRuntime
    from ._inspect_source import inspect_source
    from ._openenv import openenv_environment, openenv_source
    from ._openenv_session import OpenEnvServer, OpenEnvSession
    from ._source import Source
    from ._verifiers_source import verifiers_source
else:
    __getattr__, __dir__ = lazy_exports(__name__, _EXPORTS)
