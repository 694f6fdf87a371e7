"""`publish`: give each exported class and function the public path it is exported from.

So reprs, tracebacks and docs say `proctor.records.Grade`, not the private module it
happens to live in (httpx does the same). Pickles stay valid: the public path resolves.
"""

from __future__ import annotations

import inspect
from collections.abc import Iterable
from typing import Any

__all__ = ["publish"]


def publish(namespace: dict[str, Any], names: Iterable[str], module: str) -> None:
    """Set `__module__` to `module` on every class and function among `names`."""
    for name in names:
        value = namespace.get(name)
        if inspect.isclass(value) or inspect.isfunction(value):
            value.__module__ = module
