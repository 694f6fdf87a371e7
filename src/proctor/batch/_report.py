"""`proctor batch report`: tokens, cost and rewards of an output directory, streamed.

Costs are recomputed per model turn (`rollouts/<id>/model_turns.jsonl`, and a
simulated user's model turns in `user_turns.jsonl`) from the pricing recorded in
`batch.json`, never from today's table; a rollout without `model_turns.jsonl` falls
back to its record's `usage` (`"source": "record"`), which counts its user's turns.
Rollouts are read one page of the index and one turn at a time, so a batch of any size
fits in memory (except the per-rollout rows of the JSON document). Field reference:
docs/batch-report.md.
"""

from __future__ import annotations

import heapq
import os
from collections import Counter
from collections.abc import Iterator, Mapping, Sequence
from typing import Any

from .._errors import CorruptIndexError, StoreError
from ..store import BatchStore, JsonlReader, list_rollouts, read_batch, read_record
from ._report_agents import Agents
from ._report_render import TOP, render_report
from ._stats import RESAMPLES

__all__ = ["CATEGORIES", "FORMAT", "TIERS", "render_report", "report"]

FORMAT = "proctor.batch.report/1"
CATEGORIES = ("uncached_input", "cached_input", "cache_write", "output", "reasoning")
"""Token categories; `reasoning` is a subset of `output` and never added to a total."""
TIERS = ("standard", "long_context")
STATUSES = ("completed", "failed", "interrupted", "queued", "running")
_BILLED = CATEGORIES[:4]
_PAGE = 1000


def report(
    out: str | os.PathLike[str],
    *,
    rollouts: bool = True,
    threshold: float = 1.0,
    compare: Sequence[str] | None = None,
    resamples: int = RESAMPLES,
) -> dict[str, Any]:
    """The report of the output directory `out` as a JSON-ready document.

    Works while a runner writes `out` and after a crash (a torn last line of a
    turns file is left out and counted under `torn`). With `rollouts=False` the
    per-rollout rows are not kept (`"rollouts": null`): all `render_report` needs,
    in memory that does not grow with the batch (but for one float per rollout: its
    reward, for the agent sections). A rollout passes when its reward is at least
    `threshold`; `compare` names the two agents (A, B) to compare when the batch does
    not have exactly two.

    A damaged or missing `index.sqlite` is rebuilt from `events.jsonl` first (as a
    resume would, saying so on stderr), unless a runner has the directory open.

    Raises:
        StoreError: `out` is not a batch output directory, or its index is damaged and
            cannot be rebuilt now.
        ValueError: `compare` names an agent the batch does not have.
    """
    options = (threshold, compare, resamples)
    root = os.fspath(out)
    meta = read_batch(root)
    if os.path.exists(os.path.join(root, "index.sqlite")):
        try:
            return _report(root, meta, rollouts, *options)
        except CorruptIndexError:
            pass
    try:
        BatchStore.open(root, rebuild_index=True).close()
    except CorruptIndexError:
        raise
    except StoreError as exc:
        file = os.path.join(root, "index.sqlite")
        raise StoreError(f"{file} is corrupt and could not be rebuilt: {exc}") from None
    return _report(root, meta, rollouts, *options)


def _report(
    root: str,
    meta: Mapping[str, Any],
    rollouts: bool,
    threshold: float,
    compare: Sequence[str] | None,
    resamples: int,
) -> dict[str, Any]:
    walk = _Walk(root, meta.get("pricing") or {})
    rows = []
    for index_row in _index_rows(root):
        row = walk.rollout(index_row)
        if rollouts:
            rows.append(row)
    return {
        "format": FORMAT,
        "out": os.path.abspath(root),
        "name": meta.get("name"),
        "batch_id": meta.get("batch_id"),
        "pricing_as_of": meta.get("pricing_as_of"),
        "pricing": meta.get("pricing") or {},
        "unpriced_models": sorted(walk.unpriced_models),
        "totals": walk.total.to_json(),
        "threshold": threshold,
        "by_model": [g.to_json("model", k) for k, g in sorted(walk.by_model.items(), key=_key)],
        "by_agent": [
            {**g.to_json("agent", k), **walk.agents.extra(k, threshold)}
            for k, g in sorted(walk.by_agent.items(), key=_key)
        ],
        **walk.agents.sections(threshold, compare, resamples),
        "by_task": [g.to_json("task", k) for k, g in sorted(walk.by_task.items(), key=_key)],
        "most_expensive": [row for _, _, row in sorted(walk.top, reverse=True)],
        "torn": walk.torn,
        "corrupt_lines": walk.corrupt,
        "rollouts": rows if rollouts else None,
    }


def _key(item: tuple[Any, Any]) -> tuple[bool, str]:
    return item[0] is None, str(item[0])


def _index_rows(root: str) -> Iterator[dict[str, Any]]:
    offset = 0
    while page := list_rollouts(root, limit=_PAGE, offset=offset):
        yield from page
        offset += len(page)


# -- arithmetic ------------------------------------------------------------------------


def _int(value: Any) -> int:
    return value if isinstance(value, int) and not isinstance(value, bool) else 0


def _tokens(usage: Any) -> tuple[int, dict[str, int]]:
    """(input tokens, tokens by category) of one usage mapping."""
    u = usage if isinstance(usage, Mapping) else {}
    inp, cached, write = (_int(u.get(k)) for k in _USAGE_INPUTS)
    return inp, {
        "uncached_input": max(0, inp - cached - write),
        "cached_input": cached,
        "cache_write": write,
        "output": _int(u.get("output_tokens")),
        "reasoning": _int(u.get("reasoning_tokens")),
    }


_USAGE_INPUTS = ("input_tokens", "cached_input_tokens", "cache_write_tokens")


def _is_long(price: Mapping[str, Any], input_tokens: int) -> bool:
    threshold = price.get("long_context_threshold")
    return threshold is not None and input_tokens > threshold


def _rates(price: Mapping[str, Any], long: bool) -> dict[str, float]:
    """USD per token of each category (the `Price` rules: cache prices default to input)."""
    base_in = float(price["input"])
    in_mult = float(price.get("long_input_multiplier") or 1.0) if long else 1.0
    out_mult = float(price.get("long_output_multiplier") or 1.0) if long else 1.0
    out = float(price["output"]) * out_mult / 1e6

    def side(name: str) -> float:
        value = price.get(name)
        return (base_in if value is None else float(value)) * in_mult / 1e6

    return {
        "uncached_input": base_in * in_mult / 1e6,
        "cached_input": side("cached_input"),
        "cache_write": side("cache_write"),
        "output": out,
        "reasoning": out,
    }


# -- tallies ---------------------------------------------------------------------------


class _Tally:
    """Tokens and cost, by tier and category, of one rollout or a group of them."""

    def __init__(self) -> None:
        self.tokens = {t: dict.fromkeys(CATEGORIES, 0) for t in TIERS}
        self.cost = {t: dict.fromkeys(CATEGORIES, 0.0) for t in TIERS}
        self.recorded: float | None = None
        self.priced = 0
        self.unpriced = 0

    def add_usage(self, usage: Any, price: Mapping[str, Any] | None) -> bool:
        """Add one turn's usage; False when it has tokens but no price."""
        inp, tokens = _tokens(usage)
        long = price is not None and _is_long(price, inp)
        tier = TIERS[long]
        for cat, n in tokens.items():
            self.tokens[tier][cat] += n
        if price is None:
            return not any(tokens.values())
        rates = _rates(price, long)
        for cat, n in tokens.items():
            self.cost[tier][cat] += n * rates[cat]
        return True

    def count(self, priced: bool) -> None:
        """Count this rollout as priced, or as having tokens no price covers."""
        self.priced, self.unpriced = (1, 0) if priced else (0, 1)

    def add_recorded(self, cost: Any) -> None:
        if isinstance(cost, int | float) and not isinstance(cost, bool):
            self.recorded = (self.recorded or 0.0) + cost

    def merge(self, other: _Tally) -> None:
        for tier in TIERS:
            for cat in CATEGORIES:
                self.tokens[tier][cat] += other.tokens[tier][cat]
                self.cost[tier][cat] += other.cost[tier][cat]
        if other.recorded is not None:
            self.add_recorded(other.recorded)
        self.priced += other.priced
        self.unpriced += other.unpriced

    @property
    def has_cost(self) -> bool:
        return self.priced > 0 or self.unpriced == 0

    def total_cost(self) -> float | None:
        return sum(sum(self.cost[t][c] for c in _BILLED) for t in TIERS) if self.has_cost else None

    def row_json(self) -> dict[str, Any]:
        """A rollout's: its tokens and cost, and how many tokens were long-context."""
        long = self.tokens["long_context"]
        doc = self.to_json()
        return {
            "tokens": doc["tokens"],
            "long_context_tokens": sum(long[c] for c in _BILLED),
            "cost": doc["cost"],
            "recorded_cost": self.recorded,
            "recomputed_cost": doc["recomputed_cost"],
        }

    def to_json(self) -> dict[str, Any]:
        tiers = {
            t: _section(self.tokens[t], self.cost[t] if self.has_cost else None) for t in TIERS
        }
        both = {c: sum(self.tokens[t][c] for t in TIERS) for c in CATEGORIES}
        cost = {c: sum(self.cost[t][c] for t in TIERS) for c in CATEGORIES}
        return {
            **_section(both, cost if self.has_cost else None),
            "tiers": tiers,
            "recorded_cost": self.recorded,
            "recomputed_cost": self.total_cost(),
            "unpriced_rollouts": self.unpriced,
        }


def _section(tokens: dict[str, int], cost: dict[str, float] | None) -> dict[str, Any]:
    input_tokens = sum(tokens[c] for c in _BILLED[:3])
    return {
        "tokens": {**tokens, "input": input_tokens, "total": input_tokens + tokens["output"]},
        "cost": None if cost is None else {**cost, "total": sum(cost[c] for c in _BILLED)},
    }


class _Group:
    """A tally plus the outcomes (statuses, rewards, errors) of a group of rollouts."""

    def __init__(self) -> None:
        self.tally = _Tally()
        self.by_status: Counter[str] = Counter()
        self.errors_by_phase: Counter[str] = Counter()
        self.graded = 0
        self.reward_sum = 0.0
        self.errors = 0

    def add(self, row: Mapping[str, Any], tally: _Tally) -> None:
        self.tally.merge(tally)
        self.by_status[str(row["status"])] += 1
        if row["reward"] is not None:
            self.graded += 1
            self.reward_sum += row["reward"]
        if row["error_phase"] is not None or row["error_type"]:
            self.errors += 1
            self.errors_by_phase[str(row["error_phase"])] += 1

    def to_json(self, field: str | None = None, key: Any = None) -> dict[str, Any]:
        head = {} if field is None else {field: key}
        return {
            **head,
            "rollouts": sum(self.by_status.values()),
            "by_status": {**dict.fromkeys(STATUSES, 0), **self.by_status},
            "graded": self.graded,
            "mean_reward": self.reward_sum / self.graded if self.graded else None,
            "errors": self.errors,
            "errors_by_phase": dict(sorted(self.errors_by_phase.items())),
            **self.tally.to_json(),
        }


class _Walk:
    """Visits rollouts one at a time, adding each to the batch, model and task groups."""

    def __init__(self, root: str, pricing: Mapping[str, Any]) -> None:
        self.root = root
        self.pricing = pricing
        self.total = _Group()
        self.by_model: dict[str | None, _Group] = {}
        self.by_task: dict[str | None, _Group] = {}
        self.by_agent: dict[str | None, _Group] = {}
        self.agents = Agents()
        self.unpriced_models: set[str] = set()
        self.top: list[tuple[float, int, dict[str, Any]]] = []
        self.torn: dict[str, int] = {}
        self.corrupt = 0
        self._ranked = 0

    def rollout(self, index_row: Mapping[str, Any]) -> dict[str, Any]:
        rid = str(index_row["id"])
        record = read_record(self.root, rid)
        row = _outcome(index_row)
        tally, row["source"], row["turns"] = self._usage(rid, row["model"], record)
        tally.add_recorded(record.get("cost") if record else index_row.get("cost"))
        row["earlier_attempts"] = self._earlier(rid, row["model"], tally)
        for group in (
            self.total,
            self.by_model.setdefault(row["model"], _Group()),
            self.by_task.setdefault(row["task"], _Group()),
            self.by_agent.setdefault(row["agent"], _Group()),
        ):
            group.add(row, tally)
        self.agents.add(row, record or {})
        row.update(tally.row_json())
        self._rank(row, tally)
        return row

    def _earlier(self, rid: str, model: str | None, tally: _Tally) -> int:
        """Add the attempts a retry moved aside (their turns were paid for too)."""
        try:
            names = os.listdir(os.path.join(self.root, "rollouts", rid, "attempts"))
        except (FileNotFoundError, NotADirectoryError):
            return 0
        attempts = [n for n in names if n.isdigit()]
        for n in attempts:
            where = f"{rid}/attempts/{n}"
            record = read_record(self.root, rid, attempt=int(n))
            part, _, _ = self._usage(where, model, record)
            part.add_recorded(record.get("cost"))
            tally.merge(part)
        if tally.priced + tally.unpriced > 1:
            tally.count(tally.unpriced == 0)  # one rollout: priced, or not wholly
        return len(attempts)

    def _usage(self, where: str, model: str | None, record: Mapping[str, Any]) -> _Usage:
        """The turns (or else the record's usage) of `rollouts/<where>/`."""
        path = os.path.join(self.root, "rollouts", where, "model_turns.jsonl")
        if os.path.exists(path):
            return self._turns(where, path, model)
        tally = _Tally()
        usage = record.get("usage")
        if not isinstance(usage, Mapping):
            return tally, None, 0
        tally.count(self._add(tally, model, usage))
        return tally, "record", 0

    def _turns(self, rid: str, path: str, model: str | None) -> _Usage:
        tally = _Tally()
        reader = JsonlReader(path)
        priced = [self._add(tally, model or t.get("model"), t.get("usage")) for t in reader]
        self._note(f"{rid}/model_turns.jsonl", reader)
        turns = len(priced)
        users = os.path.join(os.path.dirname(path), "user_turns.jsonl")
        if os.path.exists(users):  # the user model's: priced as its own model
            reader = JsonlReader(users)
            priced += [self._add(tally, t.get("model"), t.get("usage")) for t in reader]
            self._note(f"{rid}/user_turns.jsonl", reader)
        tally.count(all(priced))
        return tally, "turns", turns

    def _add(self, tally: _Tally, model: Any, usage: Any) -> bool:
        name = model if isinstance(model, str) else None
        if tally.add_usage(usage, self._price(name)):
            return True
        self.unpriced_models.add(str(name))
        return False

    def _price(self, model: str | None) -> Mapping[str, Any] | None:
        entry = self.pricing.get(model) if model is not None else None
        if entry is None and model is not None:  # a turn's API model id
            found = (e for e in self.pricing.values() if isinstance(e, Mapping))
            entry = next((e for e in found if e.get("model") == model), None)
        price = entry.get("price") if isinstance(entry, Mapping) else None
        return price if isinstance(price, Mapping) else None

    def _note(self, name: str, reader: JsonlReader) -> None:
        if reader.torn:
            self.torn[name] = reader.torn
        self.corrupt += reader.corrupt

    def _rank(self, row: dict[str, Any], tally: _Tally) -> None:
        cost = tally.total_cost()
        if cost is None:
            cost = tally.recorded
        if not cost:
            return
        self._ranked += 1
        item = (cost, -self._ranked, row)
        if len(self.top) < TOP:
            heapq.heappush(self.top, item)
        elif item[0] > self.top[0][0]:
            heapq.heapreplace(self.top, item)


_Usage = tuple[_Tally, str | None, int]


def _outcome(index_row: Mapping[str, Any]) -> dict[str, Any]:
    """The rollout's identity and outcome as `events.jsonl` witnesses them (its index
    row), never as its record alone claims them: a record is a file anyone who can
    write the directory can replace; `--resume` refuses one its events do not back."""
    return {"id": index_row["id"], **{k: index_row.get(k) for k in _OUTCOME}}


_OUTCOME = (
    *("task", "agent", "model", "repeat", "attempt"),
    *("status", "reward", "error_phase", "error_type"),
)
