"""`execute()` and `resume()`: run a planned batch into its output directory.

`execute` plans first and creates the output directory only once every check passed;
`resume` reopens one, checks the config is the one it ran, and re-admits what is left.
Both hand the work to `_batch_runner.Runner`, which runs every agent loop in this
event loop, at most `max_concurrent` at a time, and reconciles leftover substrates
at exit, also after Ctrl-C.
"""

from __future__ import annotations

import hashlib
import os
import platform
import secrets
import time
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import asdict
from pathlib import Path
from typing import IO, Any

from .._errors import StoreError
from ..store import BatchStore, Durability, fsync_dir, list_rollouts, read_batch
from ._batch_result import BatchResult, blocking
from ._batch_runner import Runner, Work, assignment_of, identity, spent
from ._config import Assignment, BatchConfig
from ._config_ids import _clean
from ._config_load import load_config
from ._plan import Plan, aplan
from ._retry import chosen_ids, parse_where
from ._setup import Setup, redactor, secret_values

__all__ = ["BatchResult", "aexecute", "aresume", "execute", "resume"]


# -- execute ----------------------------------------------------------------------------


async def aexecute(
    config: BatchConfig | str | os.PathLike[str],
    output_dir: str | os.PathLike[str],
    *,
    allow_partial: bool = False,
    skip_model_check: bool = False,
    view: IO[str] | None = None,
    durability: Durability | None = None,
) -> BatchResult:
    """Plan `config`; if every check passes, run the batch into the new `output_dir`.

    `view` is where the live view goes (a terminal gets a rich panel, anything else
    plain lines); None shows nothing. `durability` overrides the config's (`strict`
    fsyncs every state change; see docs/batch-layout.md). `execute` is the same call
    for synchronous code, where SIGINT and SIGTERM stop the run cleanly (`run_main`).

    Raises:
        StoreError: `output_dir` already exists.
    """
    out = _absolute(output_dir)
    _refuse_existing(out)
    if durability is not None:
        if not isinstance(config, BatchConfig):
            config = load_config(config)
        config = _with_durability(config, durability)
    plan = await aplan(
        config, allow_partial=allow_partial, skip_model_check=skip_model_check, table=False
    )
    if not plan.ok:
        return BatchResult(launched=False, output_dir=None, plan=plan)
    if not isinstance(config, BatchConfig):
        config = load_config(config)
    batch_id = _batch_id(plan.batch or "batch")
    setup = Setup.build(config, batch_id, out)
    options = {"allow_partial": allow_partial, "skip_model_check": skip_model_check}
    work = _Queued(config, plan)
    store = _create(out, _meta(config, plan, setup, options), config, work.assignments())
    return await Runner(store, setup, "execute").run(work, len(work), view)


execute = blocking(aexecute)


class _Queued:
    """A new batch's work: its enabled assignments, each made again when the pool
    takes it (as the plan made them), so nothing per rollout lives for the run."""

    def __init__(self, config: BatchConfig, plan: Plan) -> None:
        self._config = config
        self._slugs = plan._slugs
        self._size = config.count(len(self._slugs))[1]

    def __len__(self) -> int:
        return self._size

    def __iter__(self) -> Iterator[Work]:
        return ((a, 1, None) for a in self.assignments())

    def assignments(self) -> Iterator[Assignment]:
        """The enabled assignments, in plan order."""
        return (a for a in self._config.iter_assignments(self._slugs) if a.enabled)


def _with_durability(config: BatchConfig, durability: Durability) -> BatchConfig:
    copy = config.model_copy(update={"durability": durability})
    copy._path = config.path
    return copy


def _create(
    out: str, meta: dict[str, Any], config: BatchConfig, enabled: Iterable[Assignment]
) -> BatchStore:
    """Make the output directory whole or not at all: built under a temporary name
    (batch.json and every assignment), renamed into place, then opened for writing.
    A runner killed meanwhile leaves `OUT.creating-*`, never a half-made OUT."""
    temp = f"{out}.creating-{os.getpid()}-{secrets.token_hex(3)}"
    redact = redactor(secret_values(config))
    store = BatchStore.create(temp, meta, durability=config.durability, redact=redact)
    try:
        store.add_assignments(enabled)
    finally:
        store.close()
    _refuse_existing(out)  # again: planning took time
    os.rename(temp, out)
    fsync_dir(os.path.dirname(out))
    return BatchStore.open(out, durability=config.durability, redact=redact)


def _absolute(path: str | os.PathLike[str]) -> str:
    return os.path.abspath(os.fspath(path))


def _refuse_existing(out: str) -> None:
    if os.path.lexists(out):
        raise StoreError(f"{out} already exists; a batch needs a new output directory")


def _batch_id(name: str) -> str:
    stamp = time.strftime("%Y%m%dT%H%M%S", time.gmtime())
    return f"{_clean(name)[:40]}-{stamp}-{secrets.token_hex(2)}"


def _meta(
    config: BatchConfig, plan: Plan, setup: Setup, options: dict[str, bool]
) -> dict[str, Any]:
    """What `batch.json` says besides the layout version: config as run, versions, pricing."""
    from .. import __version__
    from ..models import model_profile, parse_model, price_of, pricing_date

    env = plan.check("environment").details
    pricing, profiles = {}, {}
    for model in dict.fromkeys(m for m in setup.models.values() if m is not None):
        api_model = parse_model(model).model
        if model.startswith("profile:"):  # the settings it ran with, and its own price
            profile = model_profile(model)
            profiles[model] = profile.record()
            price = profile.effective_price()
        else:
            price = price_of(api_model)
        pricing[model] = {"model": api_model, "price": None if price is None else asdict(price)}
    return {
        "name": plan.batch,
        "batch_id": setup.batch_id,
        "config": config.model_dump(mode="json"),
        "config_digest": config.digest(),
        "config_file": None if config.path is None else str(config.path.resolve()),
        "taskset_digest": _taskset_digest(setup),
        "options": options,
        "versions": {
            "proctor": __version__,
            "python": platform.python_version(),
            "environment": {"name": env.get("name"), "version": env.get("version")},
        },
        "pricing": pricing,
        "pricing_as_of": pricing_date(),
        "profiles": profiles,
        "runner": _runner(),
        "plan": {
            "rollouts": plan.rollouts,
            "projected_concurrency": plan.projected_concurrency,
            "projected_cost_usd": plan.projected_cost_usd,
        },
    }


def _runner() -> dict[str, Any]:
    """This process as `reconcile` finds it again (`_batch_runner.identity`)."""
    return identity()


def _taskset_digest(setup: Setup) -> str:
    digest = hashlib.sha256()
    for row in setup.rows.values():
        digest.update(row)
        digest.update(b"\n")
    return digest.hexdigest()


# -- resume -----------------------------------------------------------------------------


async def aresume(
    output_dir: str | os.PathLike[str],
    *,
    retry_errors: bool = False,
    retry: Sequence[str] = (),
    retry_where: str | None = None,
    view: IO[str] | None = None,
    durability: Durability | None = None,
) -> BatchResult:
    """Continue a batch: never redo a completed rollout, re-admit the rest.

    The config recorded in `batch.json` must be unchanged: its digest, the config
    file's current content (if the file is still there) and the taskset's rows. A
    rollout in flight when the runner died continues from its checkpoint when its
    substrate survived (an environment served elsewhere, which parked the session);
    one that had not reached its task yet (provisioning, connecting) runs again from
    the start; otherwise it is recorded once as `interrupted`, in its phase. With `retry_errors`,
    failed and interrupted rollouts get a new attempt (the old one is kept on disk);
    so do the ended rollouts named in `retry` (ids) or matched by `retry_where`
    (`status=interrupted,task=add-1-2`: see `_retry.parse_where`), whatever their
    status. `durability` overrides the recorded config's for this runner. `resume` is
    the same call for synchronous code, where SIGINT and SIGTERM stop the run cleanly
    (`run_main`).

    Raises:
        StoreError: not a batch output, another runner has it, the config changed, or
            `retry` names a rollout the batch does not have.
        ValueError: a bad `retry_where` filter.
    """
    out = _absolute(output_dir)
    if retry_where is not None:
        parse_where(retry_where)  # a bad filter is refused before anything is opened
    doc = read_batch(out)
    config = BatchConfig.model_validate(doc["config"])
    store = BatchStore.open(
        out, durability=durability or config.durability, redact=redactor(secret_values(config))
    )
    try:
        setup, plan = await _reload(store, out)
        if not plan.ok:
            store.close()
            return BatchResult(launched=False, output_dir=out, plan=plan)
        chosen = chosen_ids(out, retry, retry_where)
        work, again = _leftovers(store, setup, out, retry_errors, chosen)
    except BaseException:
        store.close()
        raise
    total = sum(1 for _ in _all_rows(out))
    return await Runner(store, setup, "resume").run(work, total, view, again=again)


resume = blocking(aresume)


async def _reload(store: BatchStore, out: str) -> tuple[Setup, Plan]:
    batch = store.batch
    config = BatchConfig.model_validate(batch["config"])
    if batch.get("config_file"):
        config._path = Path(batch["config_file"])
    if config.digest() != batch.get("config_digest"):
        raise StoreError(f"{out}/batch.json: its config does not match its config_digest")
    if config.path is not None and config.path.exists():
        current = load_config(config.path)
        if current.digest() != config.digest():
            raise StoreError(
                f"{config.path} changed since the batch started; resume runs the config "
                "recorded in batch.json, so restore the file (or start a new batch)"
            )
    options = batch.get("options") or {}
    plan = await aplan(
        config,
        allow_partial=bool(options.get("allow_partial")),
        skip_model_check=bool(options.get("skip_model_check")),
        table=False,
    )
    from ._reconcile import reconcile

    await reconcile(out, final=False)  # dead runners' folders, before anything starts
    setup = Setup.build(config, str(batch["batch_id"]), out, spent=spent(out))
    if _taskset_digest(setup) != batch.get("taskset_digest"):
        raise StoreError(f"the taskset {config.taskset.source} changed since the batch started")
    return setup, plan


def _all_rows(out: str) -> Iterator[dict[str, Any]]:
    yield from list_rollouts(out, limit=None)


def _leftovers(
    store: BatchStore, setup: Setup, out: str, retry_errors: bool, chosen: set[str]
) -> tuple[list[Work], dict[str, int]]:
    """Queued rollouts, in-flight ones (adopted or recorded interrupted), retries; and
    how many ended rollouts of each status get a new attempt."""
    work: list[Work] = []
    again: dict[str, int] = {}
    for row in _all_rows(out):
        a = assignment_of(row)
        status, attempt = row["status"], row["attempt"] or 1
        if status == "queued":
            work.append((a, attempt, None))
            continue
        if status == "running":
            adopted = _adoptable(store, setup, a, attempt, row["phase"])
            if adopted is not None:  # {}: it runs again from the start
                work.append((a, attempt, adopted or None))
                continue
            status = "interrupted"  # as `_adoptable` just recorded it
        if a.rollout_id in chosen or (retry_errors and status in ("failed", "interrupted")):
            work.append((a, attempt + 1, None))
            again[status] = again.get(status, 0) + 1
    return work, again


_UNREACHED = ("provisioning", "connecting")
"""Phases a rollout's record says before `tasks.start` (each is recorded before its
work begins): a rollout the runner died with there never reached its task."""


def _adoptable(
    store: BatchStore, setup: Setup, a: Assignment, attempt: int, phase: str | None
) -> dict[str, Any] | None:
    """The parked session and checkpoint to continue `a` from; {} when nothing of it
    reached its task or a model (run it again from the start); otherwise record it
    `interrupted` (once) and return None."""
    rec = store.begin(a, attempt=attempt)
    session = rec.load_private("session.json")
    checkpoint = rec.load_private("checkpoint.json")
    if phase in _UNREACHED and not session and not checkpoint:  # a resumed one has both
        store.event("restarted", id=a.rollout_id, attempt=attempt, phase=phase)
        return {}
    why = _not_adoptable(setup, phase, session, checkpoint)
    if why is None:
        return {"session": session, "checkpoint": checkpoint}
    rec.drop_private("session.json")
    rec.finish(
        "interrupted",
        phase=phase,
        error={"phase": phase, "type": "Interrupted", "message": why},
        reward=None,
    )
    return None


def _not_adoptable(
    setup: Setup, phase: str | None, session: dict[str, Any], checkpoint: dict[str, Any]
) -> str | None:
    lost = "the runner died while this rollout was in flight"
    if not setup.adoptable:
        return f"{lost}, and its substrate died with it"
    if phase != "agent" or not session:
        return f"{lost} in phase {phase}, before its session could be parked"
    if not checkpoint:
        return f"{lost}; its agent saved no checkpoint to continue from"
    if checkpoint.get("in_flight"):
        return f"{lost} with a model turn in flight; resending it could charge it twice"
    return None
