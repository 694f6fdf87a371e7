"""An import hook scoped to a folder: its modules import `hud` as `proctor.compat.hud`."""

from __future__ import annotations

import builtins
import importlib
import importlib.abc
import importlib.machinery
import sys
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from types import ModuleType
from typing import Any

__all__ = ["KINDS", "activate", "unsupported"]

KINDS = ("hud",)
"""The foreign frameworks whose authoring names `activate` can map."""

_HOMES = {"hud": "proctor.compat.hud"}
_SUBMODULES = {"hud": ("capabilities", "environment", "graders")}


def activate(kind: str, folder: str | Path) -> dict[str, Any]:
    """Let modules under `folder` import `kind`'s names; the builtins to load one with.

    Modules whose source file lies under `folder` (imported by plain `import` from
    there on) get builtins whose `__import__` maps `kind` and its submodules onto
    proctor's; the returned builtins are for the module the loader execs itself (put
    them in its namespace as `__builtins__` before running it).

    Raises:
        ValueError: `kind` is not one of `KINDS`.
    """
    if kind not in KINDS:
        raise ValueError(f"unknown compatibility layer {kind!r} (known: {', '.join(KINDS)})")
    root = Path(folder).resolve()
    names = _builtins(kind)
    if not any(isinstance(f, _ScopedFinder) and f.root == root for f in sys.meta_path):
        sys.meta_path.insert(0, _ScopedFinder(root, names))
    return names


def unsupported(module: str, mapped: Iterable[str]) -> Any:
    """A module `__getattr__` raising `ImportError` for any name `module` does not map."""
    known = ", ".join(sorted(mapped))

    def __getattr__(name: str) -> Any:
        if name.startswith("__"):
            raise AttributeError(name)
        raise ImportError(
            f"{module}.{name} is not supported by proctor's HUD compatibility layer "
            f"(mapped: {known})",
            name=module,
        )

    return __getattr__


def _builtins(kind: str) -> dict[str, Any]:
    """The builtins namespace with an `__import__` that maps `kind`."""
    home, subs = _HOMES[kind], _SUBMODULES[kind]
    plain = builtins.__import__

    def __import__(
        name: str,
        globals: Mapping[str, Any] | None = None,
        locals: Mapping[str, Any] | None = None,
        fromlist: Sequence[str] = (),
        level: int = 0,
    ) -> ModuleType:
        top, _, rest = name.partition(".")
        if level or top != kind:
            return plain(name, globals, locals, fromlist, level)
        if rest and rest.split(".")[0] not in subs:
            raise ImportError(
                f"{name} is not supported by proctor's HUD compatibility layer (mapped: "
                f"{', '.join([kind, *(f'{kind}.{s}' for s in subs)])})",
                name=name,
            )
        module = importlib.import_module(f"{home}.{rest}" if rest else home)
        return module if fromlist else importlib.import_module(home)

    names = dict(vars(builtins))
    names["__import__"] = __import__
    return names


class _ScopedFinder(importlib.abc.MetaPathFinder):
    """Finds what the path finder finds; a module under `root` runs with `names` as
    its builtins."""

    def __init__(self, root: Path, names: dict[str, Any]) -> None:
        self.root = root
        self.names = names

    def find_spec(
        self, fullname: str, path: Sequence[str] | None, target: ModuleType | None = None
    ) -> importlib.machinery.ModuleSpec | None:
        # Cheap first: only a name that exists under `root` costs a second lookup.
        local = [str(self.root)] if path is None else [p for p in path if _under(p, self.root)]
        if not local or importlib.machinery.PathFinder.find_spec(fullname, local) is None:
            return None
        spec = importlib.machinery.PathFinder.find_spec(fullname, path, target)
        if spec is None or spec.origin is None or not _under(spec.origin, self.root):
            return None
        if isinstance(spec.loader, importlib.machinery.SourceFileLoader):
            spec.loader = _ScopedLoader(spec.loader.name, spec.loader.path, self.names)
        return spec


class _ScopedLoader(importlib.machinery.SourceFileLoader):
    def __init__(self, fullname: str, path: str, names: dict[str, Any]) -> None:
        super().__init__(fullname, path)
        self.names = names

    def exec_module(self, module: ModuleType) -> None:
        module.__dict__["__builtins__"] = self.names
        super().exec_module(module)


def _under(origin: str, root: Path) -> bool:
    """Whether `origin` is the user's code under `root` (never an installed package)."""
    try:
        path = Path(origin).resolve()
    except (OSError, ValueError):
        return False
    return path.is_relative_to(root) and "site-packages" not in path.parts
