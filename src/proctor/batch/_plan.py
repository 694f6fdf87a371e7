"""`plan()`: the read-only preflight of a batch, every check reported at once.

The checks, in order (each a `Check`; a failed one does not stop the others):

1. `config`: the config parses, the taskset loads, rollout ids are unique, and no
   two agent entries make the same task/agent/model assignment;
2. `count`: exactly `expected_rollouts` enabled rollouts (fewer with
   `allow_partial`), no more assignments than `max_rollouts` (counted, not built:
   the table is built only under that cap), and the taskset's slugs are
   `task_suite`, in order;
3. `credentials`: every provider key (and server token) the batch reads is set, and
   no provider key is in this process's environment when a `local` runtime would run
   task code here (unless `runtime.trusted`), reported by variable name only;
4. `environment`: the environment loads, reports `environment_version`, and has a
   template for every row whose args validate against it (`_plan_env` says where);
5. `substrate`: bwrap, the container engine and images, a Ray cluster with room for
   one wave, and this machine's memory and cores for it (`_plan_substrate`);
6. `models`: every model id is in its provider's live catalog;
7. `pricing`: with a `cost_cap`, every model is priced; the worst-case cost the
   limits allow is projected either way.
"""

from __future__ import annotations

import asyncio
import os
import re
import shutil
from collections import Counter
from pathlib import Path
from typing import Any, Literal

import orjson
from pydantic import BaseModel, ConfigDict, Field, PrivateAttr

from ._config import (
    Assignment,
    BatchConfig,
    BatchConfigError,
    CommandAgentEntry,
    LocalRuntimeConfig,
    PythonAgentEntry,
)
from ._config_ids import _MAX_ID, _clean, rollout_id
from ._config_load import load_config
from ._plan_env import Loaded, load
from ._plan_models import catalogs, credentials, keys_in_environment, projected_cost, unpriced
from ._plan_placement import placement_problems
from ._plan_substrate import check_substrate

__all__ = ["Check", "Plan", "aplan", "plan"]

CHECKS = ("config", "count", "credentials", "environment", "substrate", "models", "pricing")
_SHOWN = 20  # problems named in a reason or listed in details, at most
_SECRET_NAME = re.compile(r"KEY|TOKEN|SECRET|PASSW|CRED|AUTH", re.I)
_REDACTED = "[redacted]"
_CHUNK = 10_000  # assignments built between two yields to the event loop


class Check(BaseModel):
    """One admission check's outcome."""

    model_config = ConfigDict(extra="forbid")

    name: str
    ok: bool
    reason: str
    details: dict[str, Any] = Field(default_factory=dict)
    skipped: bool = False
    """The check did not run (an earlier one failed); `ok` is then False."""


class Plan(BaseModel):
    """What a batch would run, and whether it may: `ok` only if every check passed."""

    model_config = ConfigDict(extra="forbid")

    format: Literal["proctor.batch.plan/1"] = "proctor.batch.plan/1"
    ok: bool
    config: str | None
    """The config file, when planned from one."""
    config_digest: str | None
    batch: str | None
    checks: list[Check]
    rollouts: dict[str, int]
    """`total` assignments, `enabled` ones, `expected` by the config."""
    projected_concurrency: int
    """Rollouts in flight at once: `min(enabled, max_concurrent)`."""
    projected_cost_usd: float | None
    """Worst case under the per-rollout limits; None when they do not bound it."""
    assignments: list[Assignment]
    _slugs: list[str] = PrivateAttr(default_factory=list)
    """The taskset's slugs, in order: `BatchConfig.iter_assignments` makes the table again."""

    def check(self, name: str) -> Check:
        """The check called `name`.

        Raises:
            KeyError: no such check.
        """
        for check in self.checks:
            if check.name == name:
                return check
        raise KeyError(name)

    def to_json(self) -> str:
        """The plan as one indented JSON document."""
        doc = self.model_dump(mode="json", exclude={"assignments"})
        doc["assignments"] = self.assignments  # orjson writes the dataclasses: no dict copies
        return orjson.dumps(doc, option=orjson.OPT_INDENT_2).decode()


def plan(
    config: BatchConfig | str | os.PathLike[str],
    *,
    allow_partial: bool = False,
    skip_model_check: bool = False,
) -> Plan:
    """Run every admission check on `config` (a `BatchConfig` or a config file).

    Read-only: nothing is launched except the child processes and, for a container
    runtime without a host source, one probe container that loads the environment
    (see `_plan_env`). A config file that does not parse gives a plan whose `config`
    check names every problem with its line.

    Raises:
        RuntimeError: called from a running event loop (use `aplan`).
    """
    return asyncio.run(
        aplan(config, allow_partial=allow_partial, skip_model_check=skip_model_check)
    )


async def aplan(
    config: BatchConfig | str | os.PathLike[str],
    *,
    allow_partial: bool = False,
    skip_model_check: bool = False,
    table: bool = True,
) -> Plan:
    """`plan`, for callers already in an event loop.

    `table=False` leaves `assignments` empty when every check passes: for a caller
    that makes them again one at a time (`execute`), so none is held meanwhile.
    """
    if not isinstance(config, BatchConfig):
        path = Path(config)
        try:
            config = load_config(path)
        except BatchConfigError as exc:
            return _unparsed(path, exc)
    async with asyncio.TaskGroup() as tg:
        loading = tg.create_task(load(config))
        models = tg.create_task(_models(config, skip_model_check))
        substrate = tg.create_task(_substrate(config, loading))
    loaded = loading.result()
    slugs = [row["slug"] for row in loaded.rows or ()]
    total, enabled = config.count(len(slugs))
    cost = _cost(config, len(slugs))
    checks = [
        _check_config(config, loaded, slugs),
        _check_count(config, loaded, slugs, (total, enabled), allow_partial),
        _check_credentials(config),
        _check_environment(config, loaded),
        substrate.result(),
        models.result(),
        _check_pricing(config, cost),
    ]
    ok = all(c.ok for c in checks)
    built = total <= config.max_rollouts and (table or not ok)  # a refusal shows its table
    done = Plan(
        ok=ok,
        config=None if config.path is None else str(config.path),
        config_digest=config.digest(),
        batch=config.name or (config.path.stem if config.path else None),
        checks=_scrubbed(checks),
        rollouts={"total": total, "enabled": enabled, "expected": config.expected_rollouts},
        projected_concurrency=min(enabled, config.max_concurrent),
        projected_cost_usd=cost,
        assignments=await _table(config, slugs) if built else [],
    )
    done._slugs = slugs
    return done


async def _table(config: BatchConfig, slugs: list[str]) -> list[Assignment]:
    """Every assignment, built with a yield to the loop every `_CHUNK` (a signal stops it)."""
    table: list[Assignment] = []
    for assignment in config.iter_assignments(slugs):
        table.append(assignment)
        if len(table) % _CHUNK == 0:
            await asyncio.sleep(0)
    return table


def _unparsed(path: Path, exc: BatchConfigError) -> Plan:
    problems = [p.model_dump(exclude_none=True) for p in exc.problems]
    first = Check(name="config", ok=False, reason=str(exc), details={"problems": problems})
    skipped = [
        Check(name=name, ok=False, reason="not run: the config did not parse", skipped=True)
        for name in CHECKS[1:]
    ]
    return Plan(
        ok=False,
        config=str(path),
        config_digest=None,
        batch=None,
        checks=_scrubbed([first, *skipped]),
        rollouts={"total": 0, "enabled": 0, "expected": 0},
        projected_concurrency=0,
        projected_cost_usd=None,
        assignments=[],
    )


def _named(items: list[str]) -> str:
    shown = "; ".join(items[:_SHOWN])
    return shown + (f"; and {len(items) - _SHOWN} more" if len(items) > _SHOWN else "")


def _result(name: str, problems: list[str], passed: str, details: dict[str, Any]) -> Check:
    ok = not problems
    return Check(name=name, ok=ok, reason=passed if ok else _named(problems), details=details)


# -- 1. config --------------------------------------------------------------------------


def _check_config(config: BatchConfig, loaded: Loaded, slugs: list[str]) -> Check:
    problems = []
    if loaded.taskset_error is not None:
        problems.append(f"taskset: {loaded.taskset_error}")
    names = config.agent_names()
    problems += _agent_problems(config, names, loaded)
    problems += [f"agent name {n!r} is used by {c} entries" for n, c in _dupes(names)]
    problems += _same_agents(config, names)
    total = config.count(len(slugs))[0]
    if total <= config.max_rollouts:
        problems += [f"rollout id {i!r} is made {c} times" for i, c in _dupe_ids(config, slugs)]
    details = {
        "taskset": loaded.taskset_name,
        "rows": len(loaded.rows or ()),
        "agents": names,
        "repeats": config.repeats,
    }
    if config.deprecated:  # old keys still read, for one release: say the new ones
        details["deprecated"] = config.deprecated
    passed = f"{total} assignments with unique rollout ids"
    if total > config.max_rollouts:
        passed = f"{total} assignments (not built: more than max_rollouts)"
    return _result("config", problems, passed, details)


def _agent_problems(config: BatchConfig, names: list[str], loaded: Loaded) -> list[str]:
    """Agents that cannot run: a Python agent that does not resolve, a missing command."""
    problems = []
    if config.executor.kind == "ray" and config.judge is not None:
        problems.append("judge: executor 'ray' grades without a judge proxy; use executor 'local'")
    if config.executor.kind == "ray" and config.user_model is not None:
        problems.append("user_model: executor 'ray' runs without a user-model proxy; use 'local'")
    for entry, name in zip(config.agents, names, strict=True):
        if config.executor.kind == "ray" and entry.enabled and entry.model is not None:
            problems.append(
                f"agent {name!r}: executor 'ray' runs agents without the interception "
                "proxy, so an agent that names a model needs executor 'local'"
            )
        spec = config.resolve_agent(entry.agent) if isinstance(entry, PythonAgentEntry) else ""
        if spec in loaded.agent_problems:
            problems.append(f"agent {name!r}: {loaded.agent_problems[spec]}")
        elif isinstance(entry, CommandAgentEntry) and not _runnable(config, entry):
            problems.append(f"agent {name!r}: command {entry.argv[0]!r} not found")
    return problems


def _runnable(config: BatchConfig, entry: CommandAgentEntry) -> bool:
    program = entry.argv[0]
    if entry.placement == "substrate":  # found in the substrate, not here
        return True
    if os.sep not in program:
        return shutil.which(program) is not None
    cwd = config.resolve(entry.cwd) if entry.cwd else str(config.base_dir)
    return os.access(os.path.join(cwd, program), os.X_OK)


def _dupes(items: list[str]) -> list[tuple[str, int]]:
    return [(item, count) for item, count in Counter(items).items() if count > 1]


def _dupe_ids(config: BatchConfig, slugs: list[str]) -> list[tuple[str, int]]:
    """Rollout ids made more than once, in table order, counted per task and agent entry
    rather than per rollout: an id is `<prefix>r<k>` (cut and hashed when long), and
    prefixes end in `--r`, so two ids are the same only where two prefixes are."""
    names = config.agent_names()
    made: Counter[str] = Counter()
    first: dict[str, tuple[str, str]] = {}
    for slug in slugs:
        for name in names:
            prefix = f"{_clean(slug)}--{_clean(name)}--r"  # as `iter_assignments` makes it
            made[prefix] += 1
            first.setdefault(prefix, (slug, name))
    dupes = []
    for prefix, count in made.items():
        if count > 1:
            slug, name = first[prefix]
            for k in range(1, config.repeats + 1):
                rid = f"{prefix}{k}"
                dupes.append((rid if len(rid) <= _MAX_ID else rollout_id(slug, name, k), count))
    return dupes


def _same_agents(config: BatchConfig, names: list[str]) -> list[str]:
    """Entries that differ only in name: each task would get the same agent twice."""
    first: dict[bytes, str] = {}
    problems = []
    for entry, name in zip(config.agents, names, strict=True):
        identity = orjson.dumps(
            entry.model_dump(mode="json", exclude={"name", "enabled"}), option=orjson.OPT_SORT_KEYS
        )
        if identity in first:
            problems.append(
                f"agents {first[identity]!r} and {name!r} are the same agent and model; "
                "use repeats for more samples"
            )
        first.setdefault(identity, name)
    return problems


# -- 2. count ---------------------------------------------------------------------------


def _check_count(
    config: BatchConfig,
    loaded: Loaded,
    slugs: list[str],
    counted: tuple[int, int],
    allow_partial: bool,
) -> Check:
    total, enabled = counted
    expected = config.expected_rollouts
    details: dict[str, Any] = {
        "enabled": enabled,
        "expected": expected,
        "allow_partial": allow_partial,
    }
    problems = []
    if total > config.max_rollouts:
        problems.append(
            f"{total:,} assignments ({len(slugs):,} tasks x {len(config.agents)} agent "
            f"entries x {config.repeats:,} repeats) exceed max_rollouts ({config.max_rollouts:,}): "
            "every assignment is held in memory; split the batch, or raise max_rollouts"
        )
    if loaded.rows is None:
        problems.append("the taskset did not load, so nothing can be counted")
    elif enabled == 0:
        problems.append("no enabled rollouts")
    elif enabled > expected or (enabled < expected and not allow_partial):
        hint = "" if enabled > expected or allow_partial else " (--allow-partial accepts fewer)"
        problems.append(f"{enabled} enabled rollouts, expected_rollouts is {expected}{hint}")
    if config.task_suite is not None and loaded.rows is not None:
        details["task_suite"] = len(config.task_suite)
        mismatch = _suite_mismatch(config.task_suite, slugs)
        if mismatch:
            problems.append(f"task_suite: {mismatch}")
    passed = f"{enabled} enabled rollouts as expected" + (
        ", in task_suite order" if config.task_suite is not None else ""
    )
    return _result("count", problems, passed, details)


def _suite_mismatch(suite: list[str], slugs: list[str]) -> str | None:
    if suite == slugs:
        return None
    missing = [s for s in suite if s not in set(slugs)]
    extra = [s for s in slugs if s not in set(suite)]
    if missing:
        return f"not in the taskset: {', '.join(map(repr, missing[:_SHOWN]))}"
    if extra:
        return f"in the taskset but not the suite: {', '.join(map(repr, extra[:_SHOWN]))}"
    if len(suite) != len(slugs):
        return f"{len(suite)} entries in the suite for {len(slugs)} tasks (a slug repeats)"
    at = next(i for i, (a, b) in enumerate(zip(suite, slugs, strict=True)) if a != b)
    return f"order differs at position {at + 1}: suite has {suite[at]!r}, taskset {slugs[at]!r}"


# -- 3. credentials ---------------------------------------------------------------------


def _check_credentials(config: BatchConfig) -> Check:
    found = credentials(config)
    problems = [
        f"{c.variable} is not set (needed by {c.needed_by})"
        for c in found
        if c.required and not c.present
    ]
    details: dict[str, Any] = {"variables": [c.to_dict() for c in found]}
    rt = config.runtime
    if isinstance(rt, LocalRuntimeConfig):
        exposed = keys_in_environment(config)
        details["in_process_keys"] = exposed
        if exposed and not rt.trusted:
            problems.append(
                f"runtime 'local' runs task code in this process, whose environment holds "
                f"{', '.join(exposed)}: use an isolated runtime (sandbox, subprocess, "
                "container), or set runtime.trusted = true for task code you trust"
            )
    passed = f"{len(found)} credential variables checked" if found else "no credentials needed"
    return _result("credentials", problems, passed, details)


# -- 4. environment ---------------------------------------------------------------------


def _check_environment(config: BatchConfig, loaded: Loaded) -> Check:
    env = loaded.env or {}
    details: dict[str, Any] = {"loaded_in": loaded.loaded_in}
    if loaded.env is not None:
        details.update(name=env["name"], version=env["version"], templates=env["templates"])
    if loaded.notes:
        details["notes"] = loaded.notes
    problems = []
    if loaded.env_error is not None:
        problems.append(loaded.env_error)
    elif loaded.env is None:
        problems.append("not asked: the taskset did not load")
    want = config.environment_version
    if loaded.env is not None and want is not None and env["version"] != want:
        problems.append(
            f"environment {env['name']!r} reports version {env['version']!r}, "
            f"environment_version is {want!r}"
        )
    group_rewards = env.get("group_rewards") or []
    if group_rewards and config.repeats < 2:
        problems.append(
            f"environment {env['name']!r} has group rewards ({', '.join(group_rewards)}): "
            f"they need repeats >= 2, not {config.repeats}"
        )
    row_problems = env.get("row_problems") or {}
    if row_problems:
        details["row_problems"] = dict(list(row_problems.items())[:_SHOWN])
        problems += [f"task {slug!r}: {why}" for slug, why in row_problems.items()]
    passed = f"environment {env.get('name')!r} version {env.get('version')!r} serves every row"
    return _result("environment", problems, passed, details)


# -- 5. substrate -----------------------------------------------------------------------


async def _substrate(config: BatchConfig, loading: asyncio.Task[Loaded]) -> Check:
    loaded = await loading
    rows = loaded.rows or []
    enabled = len(rows) * config.repeats * sum(a.enabled for a in config.agents)
    try:
        problems, details = await check_substrate(config, rows, enabled)
    except (ValueError, TypeError) as exc:  # a malformed resources mapping in a row
        problems, details = [f"{exc}"], {"runtime": config.runtime.kind}
    problems += placement_problems(config, rows, loaded.env)
    passed = f"{config.runtime.kind} substrates for a wave of {details.get('wave', 0)}"
    return _result("substrate", problems, passed, details)


# -- 6. models --------------------------------------------------------------------------


async def _models(config: BatchConfig, skip: bool) -> Check:
    if skip:
        return Check(
            name="models", ok=True, reason="skipped (--skip-model-check)", details={"skipped": True}
        )
    problems, records = await catalogs(config)
    passed = f"{len(records)} catalogs list every model" if records else "no agent names a model"
    return _result("models", problems, passed, {"catalogs": records})


# -- 7. pricing -------------------------------------------------------------------------


def _cost(config: BatchConfig, tasks: int) -> float | None:
    by_model: Counter[str] = Counter()
    for entry in config.agents:
        if entry.enabled and entry.model is not None:
            by_model[entry.model] += tasks * config.repeats
    return projected_cost(config, dict(by_model))


def _check_pricing(config: BatchConfig, cost: float | None) -> Check:
    missing = unpriced(config)
    unmetered = [
        name
        for entry, name in zip(config.agents, config.agent_names(), strict=True)
        if entry.enabled and entry.model is None
    ]
    details: dict[str, Any] = {
        "cost_cap": config.cost_cap,
        "projected_worst_case_usd": cost,
        "unpriced": missing,
        "unmetered_agents": unmetered,
    }
    if config.cost_cap is not None and cost is not None:
        details["projection_exceeds_cap"] = cost > config.cost_cap
    problems = []
    if config.cost_cap is not None:
        problems = [f"no price for {m!r}, so cost_cap cannot be enforced" for m in missing]
    projected = "unbounded by limits" if cost is None else f"at most ${cost:.2f} by limits"
    return _result("pricing", problems, f"projected cost {projected}", details)


# -- secrets ----------------------------------------------------------------------------


def _scrubbed(checks: list[Check]) -> list[Check]:
    """The checks with any secret-looking variable's value blanked out (defense in depth)."""
    secrets = {
        value for name, value in os.environ.items() if _SECRET_NAME.search(name) and len(value) >= 8
    }
    text = orjson.dumps([c.model_dump(mode="json") for c in checks]).decode()
    if not any(secret in text for secret in secrets):
        return checks
    for secret in sorted(secrets, key=len, reverse=True):
        text = text.replace(orjson.dumps(secret).decode()[1:-1], _REDACTED)
    return [Check.model_validate(c) for c in orjson.loads(text)]
