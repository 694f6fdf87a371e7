"""HUD's top-level authoring names, as proctor's (`proctor serve --compat hud`).

Mapped: `Environment` (see `proctor.compat.hud.environment`); the submodules
`hud.environment`, `hud.graders` and `hud.capabilities`. Any other name of HUD's
(`Task`, `Taskset`, `Job`, runtimes, agents, ...) raises `ImportError` naming it.
"""

from .._scope import unsupported
from .environment import Environment

__all__ = ["Environment"]

__getattr__ = unsupported("hud", __all__)
