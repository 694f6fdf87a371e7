"""The output directory's layout version, its terminal statuses and its `batch.json`."""

from __future__ import annotations

import os
from typing import Any

import orjson

from .._errors import StoreError
from . import _index

__all__ = ["LAYOUT_VERSION", "READABLE", "TERMINAL", "read_batch"]

LAYOUT_VERSION = 2
"""The version of the layout this code writes (`layout_version` in `batch.json`): 2 keeps
every rollout record in `rollouts/segment-NNN.jsonl`. It also reads 1 (one
`rollouts/<id>.json` per record), and resuming such a folder makes it 2."""
READABLE = (1, 2)
TERMINAL = _index.ENDED
"""The statuses a rollout ends in: `completed`, `failed`, `interrupted`."""


def read_batch(path: str | os.PathLike[str]) -> dict[str, Any]:
    """The `batch.json` of an output directory.

    Raises:
        StoreError: no `batch.json` (not a batch output, or one whose creation died
            before it finished), or a `layout_version` this code does not read.
    """
    file = os.path.join(os.fspath(path), "batch.json")
    try:
        with open(file, "rb") as f:
            doc = orjson.loads(f.read())
    except FileNotFoundError:
        raise StoreError(f"{path} is not a batch output directory (no batch.json)") from None
    except orjson.JSONDecodeError as exc:
        raise StoreError(f"{file} is not JSON: {exc}") from None
    version = doc.get("layout_version") if isinstance(doc, dict) else None
    if version not in READABLE:
        raise StoreError(
            f"{file} has layout_version {version!r}; this proctor reads "
            f"{' and '.join(map(str, READABLE))}"
        )
    return doc  # type: ignore[no-any-return]
