"""Offline agents for `coding`: `solve` answers with the fixed module, `unchanged`
with the buggy one (so its tests fail where the bug shows).

`proctor run examples/coding/tasks.py --agent examples/coding/solver.py:solve`.
"""

from __future__ import annotations

import re

from env import BUGS

__all__ = ["solve", "unchanged"]

_MODULE = re.compile(r"In `([^`]+)`")


def _bug(prompt: str) -> str:
    match = _MODULE.search(prompt)
    module = match.group(1) if match else ""
    for name, bug in BUGS.items():
        if bug.module == module:
            return name
    raise ValueError(f"not a coding prompt: {prompt[:80]!r}")


def solve(prompt: str) -> str:
    """The corrected module, in a code fence as a model would write it."""
    return f"```python\n{BUGS[_bug(prompt)].reference}```"


def unchanged(prompt: str) -> str:
    """The module as it was: the tests the bug breaks fail."""
    return BUGS[_bug(prompt)].source
