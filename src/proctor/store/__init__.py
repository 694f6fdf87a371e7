"""The durable output directory of a batch: its layout, the writer and the readers.

Every batch, `proctor run` and the dashboard share this layout (version
`LAYOUT_VERSION`, written into `batch.json`; full reference in docs/batch-layout.md):

```
OUT/
  batch.json          config as run, versions, pricing; written once, fsynced
  batch-state.json    snapshot of every assignment's status, from the index, replaced
                      atomically every few seconds and at close
  events.jsonl        append-only: batch events and every rollout's index changes
  index.sqlite        one row per rollout (SQLite, WAL), for filtering and sorting
  rollouts/
    segment-NNN.jsonl every rollout's record, one JSON line each, appended (the index
                      and its event say where): assignment, status, phase, attempt,
                      timings, stop reason, result (grade, reward, error with phase),
                      usage, cost, and its trace when not streamed
    <id>.json         (layout 1 only: the record in its own file; still read)
    <id>/             made only when the rollout has one of these:
      model_turns.jsonl   one line per model turn
      user_turns.jsonl    one line per turn of a simulated user's model
      trace.jsonl         trace steps, streamed as they happen
      checkpoint.json     the model-visible state to continue from
      evaluation/status.json
      artifacts/          files produced, with SHA256SUMS (`sha256sum -c` format)
      log.txt             environment and harness output
      attempts/<n>/       an earlier attempt, moved aside whole by a retry
```

Write with `BatchStore` (`create` a new directory, `open` to resume, with its checks
and recovery) and one `RolloutRecorder` per rollout (`BatchStore.begin`, given anything
shaped like a `PlannedRollout`).

Read, while a runner writes: `read_batch`, `read_state`, `read_events` (a
`JsonlReader`), `read_rollout` (every file of one rollout), `read_record`,
`index_row`, `locate_record`, `parse_object` (one line of a JSONL file); index rows
with `list_rollouts` (a `RolloutQuery`: filters, sort, page), `count_rollouts`,
`page_rollouts` (a page and its total), `rollout_columns`; the aggregates a dashboard
shows: `totals`, `cost_by_model`, `distinct_values`, `cell_means`, `task_means`,
`reward_histogram`, `group_reward_histograms`, `cost_curve`, `recorded_cost`. This
package imports no runner: reading an output directory loads only it.
"""

from __future__ import annotations

from .._public import lazy_exports

TYPE_CHECKING = False  # typing's constant, without importing typing (mypy reads it so)

__all__ = [
    "FILTERABLE",
    "LAYOUT_VERSION",
    "SORTABLE",
    "TERMINAL",
    "BatchStore",
    "BatchTotals",
    "Durability",
    "Filter",
    "JsonlReader",
    "PlannedRollout",
    "RolloutPage",
    "RolloutQuery",
    "RolloutRecorder",
    "cell_means",
    "cost_by_model",
    "cost_curve",
    "count_rollouts",
    "distinct_values",
    "fsync_dir",
    "group_reward_histograms",
    "index_row",
    "list_rollouts",
    "locate_record",
    "page_rollouts",
    "parse_object",
    "read_batch",
    "read_events",
    "read_record",
    "read_rollout",
    "read_state",
    "recorded_cost",
    "reward_histogram",
    "rollout_columns",
    "task_means",
    "totals",
]
_EXPORTS = {
    "FILTERABLE": "._index",
    "LAYOUT_VERSION": "._layout",
    "SORTABLE": "._index",
    "TERMINAL": "._layout",
    "BatchStore": "._store",
    "BatchTotals": "._queries",
    "Durability": "._journal",
    "Filter": "._query",
    "JsonlReader": "._files",
    "PlannedRollout": "._recorder",
    "RolloutPage": "._queries",
    "RolloutQuery": "._query",
    "RolloutRecorder": "._recorder",
    "cell_means": "._queries",
    "cost_by_model": "._queries",
    "cost_curve": "._queries",
    "count_rollouts": "._read",
    "distinct_values": "._queries",
    "fsync_dir": "._files",
    "group_reward_histograms": "._queries",
    "index_row": "._read",
    "list_rollouts": "._read",
    "locate_record": "._read",
    "page_rollouts": "._queries",
    "parse_object": "._files",
    "read_batch": "._layout",
    "read_events": "._read",
    "read_record": "._read",
    "read_rollout": "._read",
    "read_state": "._read",
    "recorded_cost": "._read",
    "reward_histogram": "._queries",
    "rollout_columns": "._queries",
    "task_means": "._queries",
    "totals": "._queries",
}

if TYPE_CHECKING:
    from ._files import JsonlReader, fsync_dir, parse_object
    from ._index import FILTERABLE, SORTABLE
    from ._journal import Durability
    from ._layout import LAYOUT_VERSION, TERMINAL, read_batch
    from ._queries import (
        BatchTotals,
        RolloutPage,
        cell_means,
        cost_by_model,
        cost_curve,
        distinct_values,
        group_reward_histograms,
        page_rollouts,
        reward_histogram,
        rollout_columns,
        task_means,
        totals,
    )
    from ._query import Filter, RolloutQuery
    from ._read import (
        count_rollouts,
        index_row,
        list_rollouts,
        locate_record,
        read_events,
        read_record,
        read_rollout,
        read_state,
        recorded_cost,
    )
    from ._recorder import PlannedRollout, RolloutRecorder
    from ._store import BatchStore
else:
    __getattr__, __dir__ = lazy_exports(__name__, _EXPORTS)
