"""Public names: where each lives (`publish`), loading them lazily (`lazy_exports`), and
old names kept for a release (`deprecated_alias`).

`publish` gives each exported class and function the public path it is exported from,
so reprs, tracebacks and docs say `proctor.records.Grade`, not the private module it
happens to live in (httpx does the same). Pickles stay valid: the public path resolves.

A package loads its exports lazily (PEP 562), so that `import proctor` and the
`python -m proctor.serve` child load only what they touch. The pattern, in its
`__init__.py` (`proctor.env`'s, say):

```python
from .._public import lazy_exports

TYPE_CHECKING = False  # typing's constant, without importing typing (mypy reads it so)

__all__ = ["Environment", "graders", ...]  # a literal: mypy and the layer test read it
_EXPORTS = {"Environment": "._environment", "graders": "._graders", ...}

if TYPE_CHECKING:  # what mypy sees: the same names, from the same modules
    from . import _graders as graders
    from ._environment import Environment
else:
    __getattr__, __dir__ = lazy_exports(__name__, _EXPORTS, deprecated={...})
```

A name maps to the module defining it; a name its module `._<name>` (or `.<name>`) does
not define is that module itself (`graders`). Adding an export is one line in each of the three;
tests/test_exports checks that they agree.

A renamed or moved public name stays reachable under its old name for one minor
release: `deprecated={"Limits": "proctor.proxy.ModelLimits"}` resolves the old name to
the new object with a `DeprecationWarning` naming both and the release that removes it
(`REMOVED_IN`).
"""

from __future__ import annotations

import importlib
import sys
import types
import warnings

TYPE_CHECKING = False  # kept off `import proctor`'s path: typing costs more than proctor
if TYPE_CHECKING:
    from collections.abc import Callable, Iterable, Mapping
    from typing import Any

__all__ = ["REMOVED_IN", "deprecated_alias", "lazy_exports", "publish"]

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
        if isinstance(value, type | types.FunctionType):
            value.__module__ = module
    if deprecated:
        namespace["__getattr__"] = _module_getattr(module, dict(deprecated))


def lazy_exports(
    package: str,
    exports: Mapping[str, str],
    *,
    deprecated: Mapping[str, str] | None = None,
) -> tuple[Callable[[str], Any], Callable[[], list[str]]]:
    """A package's `__getattr__` and `__dir__` that import each export on first use.

    `exports` maps a public name to the module defining it, relative to `package`
    (`"._environment"`); a name that its module `._<name>` does not define is that
    module. The value is published (`publish`) and cached in the package, with those of
    the names already loaded, so the next access is a plain attribute; one that already
    has a public home (another package's export, re-exported here) keeps it. An unknown
    name goes through `deprecated` (see `deprecated_alias`), else raises AttributeError
    naming it.
    """
    namespace = sys.modules[package].__dict__
    table = {name: _absolute(where, package) for name, where in exports.items()}
    old = dict(deprecated or {})

    def __getattr__(name: str) -> Any:
        where = table.get(name)
        if where is None:
            return deprecated_alias(package, name, old)
        module = importlib.import_module(where)
        value = vars(module).get(name)
        if value is None and where.rpartition(".")[2] in (name, f"_{name}"):
            value = module  # `graders`: the module `._graders` itself
        elif value is None:  # another package's lazy export, or a wrong table: its error
            value = getattr(module, name)
        keep(name, value)
        # Publish what else is loaded by now, so a class reached through its private
        # module before the package (inside the package, say) has its public path.
        for other, home in table.items():
            loaded = sys.modules.get(home)
            if other not in namespace and loaded and (found := vars(loaded).get(other)):
                keep(other, found)
        return value

    def keep(name: str, value: Any) -> None:
        """Cache `value` in the package; publish it there unless it has a public home."""
        if isinstance(value, type | types.FunctionType) and _is_private(value.__module__):
            value.__module__ = package
        namespace[name] = value

    def __dir__() -> list[str]:
        return sorted({*namespace, *table})

    return __getattr__, __dir__


def _is_private(module: str) -> bool:
    """Whether a dotted module path has a private part (`proctor.env._shell`)."""
    return any(part.startswith("_") for part in module.split("."))


def _absolute(where: str, package: str) -> str:
    """`where` (`._x`, `.._y`) relative to `package`, as an absolute module name."""
    dots = len(where) - len(where.lstrip("."))
    if dots == 0:
        return where
    return ".".join([*package.split(".")[: len(package.split(".")) - dots + 1], where[dots:]])


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
