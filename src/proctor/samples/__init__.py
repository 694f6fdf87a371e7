"""Training samples: graded rollouts split into branches, exported for a trainer.

A rollout's model turns split into branches (`branches`): runs of turns whose context
only grows. A compaction or a sub-agent starts a new branch; each branch is one
`Sample` with the prompt, the completion, token ids, logprobs and a loss mask when the
model server returned them (vLLM), and the rollout's reward and advantage in its group.

```python
from proctor.samples import samples_from_batch, samples_from_job, write_samples

for sample in samples_from_job(job):          # a Job from Taskset.run
    ...
write_samples(samples_from_batch("runs/b1"), "samples.parquet", "parquet")
```

`proctor export OUT --format jsonl|parquet -o FILE` does the same from the command
line. Columns and rules: docs/samples.md.
"""

from __future__ import annotations

from .._public import lazy_exports

TYPE_CHECKING = False  # typing's constant, without importing typing (mypy reads it so)

__all__ = [
    "BatchReading",
    "Branch",
    "ExportCounts",
    "ModelTurn",
    "Sample",
    "branches",
    "parquet_schema",
    "samples_from_batch",
    "samples_from_job",
    "write_samples",
]
_EXPORTS = {
    "BatchReading": "._sources",
    "Branch": "._branch",
    "ExportCounts": "._export",
    "ModelTurn": "._branch",
    "Sample": "._sample",
    "branches": "._branch",
    "parquet_schema": "._export",
    "samples_from_batch": "._sources",
    "samples_from_job": "._sources",
    "write_samples": "._export",
}

if TYPE_CHECKING:
    from ._branch import Branch, ModelTurn, branches
    from ._export import ExportCounts, parquet_schema, write_samples
    from ._sample import Sample
    from ._sources import BatchReading, samples_from_batch, samples_from_job
else:
    __getattr__, __dir__ = lazy_exports(__name__, _EXPORTS)
