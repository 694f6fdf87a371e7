"""HUD's `Environment` (and `Workspace`) on proctor's.

Mapped as HUD defines them: `Environment(name, *, version, capabilities)`,
`@env.template(id=, description=, input=, returns=)` (calling one mints a proctor
`Task`), `@env.initialize`, `@env.shutdown`, `env.add_capability` (a same-named
capability is replaced, as in HUD), `env.capability(name)`, `env.templates`, and
`env.workspace(root)`: the directory served over SSH (`ssh/2`), without HUD's bubblewrap
sandbox (the substrate proctor serves it in is the sandbox). `Answer` is proctor's.
"""

from __future__ import annotations

from collections.abc import Iterable
from pathlib import Path
from typing import Any

from ...env import Answer
from ...env import Capability as _Capability
from ...env import Environment as _Environment
from .._scope import unsupported
from .._workspace import Workspace
from .capabilities import Capability

__all__ = ["Answer", "Capability", "Environment", "Workspace"]


class Environment(_Environment):
    """HUD's `Environment`: proctor's, with HUD's signature and replacing capabilities."""

    def __init__(
        self,
        name: str = "environment",
        *,
        version: str = "0.0.1",
        capabilities: Iterable[_Capability] | None = None,
    ) -> None:
        super().__init__(name, version, capabilities or ())
        self._workspaces: dict[str, Workspace] = {}

    @property
    def templates(self) -> dict[str, Any]:
        """The registered templates by id (HUD's alias of `tasks`)."""
        return self.tasks

    def add_capability(self, capability: _Capability) -> None:
        """Publish `capability`, replacing a same-named one (HUD's rule)."""
        self._capabilities.pop(capability.name, None)
        super().add_capability(capability)

    def workspace(
        self,
        root: str | Path,
        *,
        name: str = "shell",
        track_files: bool | None = None,
        **kwargs: Any,
    ) -> Workspace:
        """Serve `root` over SSH as capability `name` while the environment serves.

        Raises:
            ImportError: file tracking or a `Workspace` option proctor does not map.
            ValueError: a workspace of that name is already attached.
        """
        if track_files:
            raise _unmapped("Environment.workspace(track_files=True)")
        if name in self._workspaces:
            raise ValueError(f"workspace capability {name!r} is already attached")
        ws = Workspace(root, **kwargs)
        self._workspaces[name] = ws

        async def up() -> None:
            await ws.start()
            self.add_capability(ws.capability(name))

        async def down() -> None:
            self._capabilities.pop(name, None)
            await ws.stop()

        self.initialize(up)
        self.shutdown(down)
        return ws

    def gym(self, *args: Any, **kwargs: Any) -> Any:
        """HUD's robot simulators are not mapped.

        Raises:
            ImportError: always.
        """
        raise _unmapped("Environment.gym")


def _unmapped(what: str) -> ImportError:
    return ImportError(f"{what} is not supported by proctor's HUD compatibility layer")


__getattr__ = unsupported("hud.environment", __all__)
