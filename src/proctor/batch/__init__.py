"""Batches: config, plan, execute and resume, report, comparison, reconcile.

A batch writes the durable output directory of `proctor.store` (layout, writer and
readers; docs/batch-layout.md). The store's names this package exported before
(`BatchStore`, `RolloutRecorder`, `PlannedRollout`, `Durability`, `LAYOUT_VERSION`,
`TERMINAL`, `JsonlReader`, `list_rollouts`, `count_rollouts`, `read_rollout`,
`read_events`, `read_state`, `read_batch`) still import from here, the same objects;
their home is `proctor.store` (listed in its `__all__`, not this one's), which reads an
output directory without loading the runner.

Run a batch with `execute(config, output_dir)` (plan first; a new directory only when
every check passes) and continue one with `resume(output_dir)`. Agents that are Python
objects rather than config entries (`proctor run`'s) record into the same layout through
`RecordedRollouts`.

Compare two agents with `compare` (the statistics: `paired_comparison`, `verdict`,
`flakiness`, `pass_at_k`; docs/batch-report.md).
"""

from .. import store as _store
from .._public import publish
from ._compare import agents_of, compare, render_comparison, scored
from ._config import Assignment, BatchConfig, ConfigProblem, rollout_id
from ._config_load import load_config, parse_config
from ._config_runtime import build_runtime
from ._execute import BatchResult, aexecute, aresume, execute, resume
from ._plan import Check, Plan, aplan, plan
from ._reconcile import reconcile, reconcile_sync
from ._recorded import RecordedRollouts
from ._report import render_report, report
from ._row_problems import row_problems
from ._stats import advantage_summary, flakiness, paired_comparison, pass_at_k, verdict

__all__ = [
    "Assignment",
    "BatchConfig",
    "BatchResult",
    "Check",
    "ConfigProblem",
    "Plan",
    "RecordedRollouts",
    "advantage_summary",
    "aexecute",
    "agents_of",
    "aplan",
    "aresume",
    "build_runtime",
    "compare",
    "execute",
    "flakiness",
    "load_config",
    "paired_comparison",
    "parse_config",
    "pass_at_k",
    "plan",
    "reconcile",
    "reconcile_sync",
    "render_comparison",
    "render_report",
    "report",
    "resume",
    "rollout_id",
    "row_problems",
    "scored",
    "verdict",
]

# Importable from here as before; their home (and `__all__`) is `proctor.store`.
LAYOUT_VERSION = _store.LAYOUT_VERSION
TERMINAL = _store.TERMINAL
BatchStore = _store.BatchStore
Durability = _store.Durability
JsonlReader = _store.JsonlReader
PlannedRollout = _store.PlannedRollout
RolloutRecorder = _store.RolloutRecorder
count_rollouts = _store.count_rollouts
list_rollouts = _store.list_rollouts
read_batch = _store.read_batch
read_events = _store.read_events
read_rollout = _store.read_rollout
read_state = _store.read_state

publish(globals(), __all__, __name__)
