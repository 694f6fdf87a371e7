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

from __future__ import annotations

from .._public import lazy_exports

TYPE_CHECKING = False  # typing's constant, without importing typing (mypy reads it so)

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
_EXPORTS = {
    "Assignment": "._config",
    "BatchConfig": "._config",
    "BatchResult": "._execute",
    "Check": "._plan",
    "ConfigProblem": "._config",
    "Plan": "._plan",
    "RecordedRollouts": "._recorded",
    "advantage_summary": "._stats",
    "aexecute": "._execute",
    "agents_of": "._compare",
    "aplan": "._plan",
    "aresume": "._execute",
    "build_runtime": "._config_runtime",
    "compare": "._compare",
    "execute": "._execute",
    "flakiness": "._stats",
    "load_config": "._config_load",
    "paired_comparison": "._stats",
    "parse_config": "._config_load",
    "pass_at_k": "._stats",
    "plan": "._plan",
    "reconcile": "._reconcile",
    "reconcile_sync": "._reconcile",
    "render_comparison": "._compare",
    "render_report": "._report",
    "report": "._report",
    "resume": "._execute",
    "rollout_id": "._config",
    "row_problems": "._row_problems",
    "scored": "._compare",
    "verdict": "._stats",
    # importable from here as before; their home (and `__all__`) is `proctor.store`
    "LAYOUT_VERSION": "..store",
    "TERMINAL": "..store",
    "BatchStore": "..store",
    "Durability": "..store",
    "JsonlReader": "..store",
    "PlannedRollout": "..store",
    "RolloutRecorder": "..store",
    "count_rollouts": "..store",
    "list_rollouts": "..store",
    "read_batch": "..store",
    "read_events": "..store",
    "read_rollout": "..store",
    "read_state": "..store",
}

if TYPE_CHECKING:
    from ..store import LAYOUT_VERSION as LAYOUT_VERSION
    from ..store import TERMINAL as TERMINAL
    from ..store import BatchStore as BatchStore
    from ..store import Durability as Durability
    from ..store import JsonlReader as JsonlReader
    from ..store import PlannedRollout as PlannedRollout
    from ..store import RolloutRecorder as RolloutRecorder
    from ..store import count_rollouts as count_rollouts
    from ..store import list_rollouts as list_rollouts
    from ..store import read_batch as read_batch
    from ..store import read_events as read_events
    from ..store import read_rollout as read_rollout
    from ..store import read_state as read_state
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
else:
    __getattr__, __dir__ = lazy_exports(__name__, _EXPORTS)
