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

from .._public import publish
from ._detect import detect, harbor_source
from ._harbor import harbor_tasks
from ._harbor_runtime import HarborRuntime
from ._inspect_source import inspect_source
from ._openenv import openenv_environment, openenv_source
from ._openenv_session import OpenEnvServer, OpenEnvSession
from ._source import Source
from ._verifiers_source import verifiers_source

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

publish(globals(), __all__, __name__)
