"""`publish`: give each exported class and function the public path it is exported from.

So reprs, tracebacks and docs say `proctor.records.Grade`, not the private module it
happens to live in (httpx does the same). Pickles stay valid: the public path resolves.

A renamed or moved public name stays reachable under its old name for one minor
release: `publish(..., deprecated={"Limits": "proctor.proxy.ModelLimits"})` gives the
package a module `__getattr__` that resolves the old name to the new object with a
`DeprecationWarning` naming both and the release that removes it (`REMOVED_IN`).
"""

from __future__ import annotations

import importlib
import inspect
import warnings
from collections.abc import Callable, Iterable, Mapping
from typing import Any

__all__ = ["REMOVED_IN", "deprecated_alias", "publish"]

REMOVED_IN = "0.2"
"""The release that drops today's deprecated aliases: the minor after the current 0.1."""


def publish(
    namespace: dict[str, Any],
    names: Iterable[str],
    module: str,
    *,
    deprecated: Mapping[str, str] | None = None,
) -> None:
    """Set `__module__` to `module` on every class and function among `names`.

    `deprecated` maps an old name to the dotted path of what replaced it; the package
    then resolves the old name through a module `__getattr__`, with a warning.
    """
    for name in names:
        value = namespace.get(name)
        if inspect.isclass(value) or inspect.isfunction(value):
            value.__module__ = module
    if deprecated:
        namespace["__getattr__"] = _module_getattr(module, dict(deprecated))


def deprecated_alias(module: str, name: str, table: Mapping[str, str]) -> Any:
    """`module.name` through `table` (old name -> new dotted path), with a warning.

    Raises AttributeError, as a module does, for a name that is not in `table`.
    """
    new = table.get(name)
    if new is None:
        raise AttributeError(f"module {module!r} has no attribute {name!r}")
    warnings.warn(
        f"{module}.{name} is deprecated: use {new}; the old name is removed in {REMOVED_IN}",
        DeprecationWarning,
        stacklevel=3,
    )
    home, _, attribute = new.rpartition(".")
    return getattr(importlib.import_module(home), attribute)


def _module_getattr(module: str, table: dict[str, str]) -> Callable[[str], Any]:
    def __getattr__(name: str) -> Any:
        return deprecated_alias(module, name, table)

    return __getattr__
