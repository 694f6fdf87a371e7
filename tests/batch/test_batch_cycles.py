"""A batch leaves no reference cycles per rollout.

Each batch runs with automatic collection off; a full collection afterwards finds the
same handful of objects for 5 rollouts as for 30 (per batch, not per rollout: the
pretty-printing JSON encoder's closures for batch.json and one child process's pipe
protocol, both in the standard library).
"""

from __future__ import annotations

import asyncio
import gc
from pathlib import Path

from exec_env import config, workspace, write_config

from proctor.batch import aexecute


def cyclic_garbage(root: Path, n: int) -> int:
    rows = [
        {"env": "mini", "id": "add", "args": {"a": i, "b": 2}, "slug": f"add-{i}"} for i in range(n)
    ]
    root.mkdir()
    workspace(root, rows)
    cfg = write_config(root, config(expected_rollouts=n, max_concurrent=4))

    async def go() -> None:
        result = await aexecute(cfg, root / "out")
        assert result.exit_code == 0 and result.counts == {"completed": n}, result

    gc.collect()
    gc.disable()
    try:
        asyncio.run(go())
        return gc.collect()
    finally:
        gc.enable()


def test_the_batch_runner_leaves_no_cyclic_garbage_per_rollout(tmp_path: Path) -> None:
    cyclic_garbage(tmp_path / "warm", 2)  # first-use caches and imports are not garbage
    few = cyclic_garbage(tmp_path / "few", 5)
    many = cyclic_garbage(tmp_path / "many", 30)
    assert few < 200
    assert many <= few + 5, f"{(many - few) / 25:.1f} cyclic objects per rollout"
