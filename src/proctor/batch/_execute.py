"""`execute()` and `resume()`: run a planned batch into its output directory.

`execute` plans first and creates the output directory only once every check passed;
`resume` reopens one, checks the config is the one it ran, and re-admits what is left.
Both run every agent loop in this event loop, at most `max_concurrency` at a time,
record each rollout as it goes (`_recording`), stop launching at the batch cost cap,
and reconcile leftover substrates at exit, also after Ctrl-C.
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import os
import platform
import secrets
import signal
import socket
import time
from collections.abc import Iterator
from contextlib import AsyncExitStack
from dataclasses import asdict
from pathlib import Path
from typing import IO, Any

import orjson
from pydantic import BaseModel, ConfigDict

from .._errors import StoreError
from .._tempdirs import owner
from . import _files
from ._config import Assignment, BatchConfig, RayExecutorConfig, _clean
from ._config_load import load_config
from ._groups import Earlier, GroupRewards, Member, group_sizes, run_from_record
from ._plan import Plan, aplan
from ._read import list_rollouts, read_rollout, recorded_cost
from ._recording import Recording
from ._setup import Setup, redactor, secret_values
from ._store import BatchStore, Durability, read_batch
from ._tally import Tally

__all__ = ["BatchResult", "aexecute", "aresume", "execute", "resume"]

_ENDED_OK = "completed"
_SIGNALS: list[str] = []  # the signals `_run_main` received, latest last
_Work = tuple[Assignment, int, dict[str, Any] | None]
"""An assignment, its attempt, and the parked session and checkpoint to continue."""


class BatchResult(BaseModel):
    """What a batch run did: printed as JSON by `proctor batch --execute`/`--resume`."""

    model_config = ConfigDict(extra="forbid")

    format: str = "proctor.batch.result/1"
    launched: bool
    """False when the plan refused (then `plan` says why) or nothing was left to run."""
    output_dir: str | None
    batch_id: str | None = None
    counts: dict[str, int] = {}
    """Every rollout of the batch by status (`queued` ones were never launched)."""
    ran: int = 0
    """Rollouts that ended in this run."""
    evaluation_failed: int = 0
    """Rollouts whose grading failed (never a reward of 0)."""
    teardown_errors: int = 0
    stopped: str | None = None
    """`batch_cost_cap`, `interrupted` or `error` when the run stopped before the end."""
    error: str | None = None
    """What stopped the runner itself (`stopped == "error"`); what ran is recorded."""
    signal: str | None = None
    """The signal that interrupted the run (`SIGINT`, `SIGTERM`)."""
    wall_s: float = 0.0
    cost_usd: float | None = None
    plan: Plan | None = None

    @property
    def exit_code(self) -> int:
        """0 when every rollout completed (graded); 128 + the signal's number after an
        interrupt (130 for Ctrl-C, 143 for SIGTERM); else 1."""
        if self.stopped == "interrupted":
            return 143 if self.signal == "SIGTERM" else 130
        if not self.launched and self.plan is not None:
            return 1
        done = self.counts.get(_ENDED_OK, 0)
        return 0 if done == sum(self.counts.values()) and not self.evaluation_failed else 1

    def to_json(self) -> str:
        """The result as one indented JSON document (the plan only when it refused)."""
        exclude = {"plan"} if self.launched or self.plan is None else set()
        doc = self.model_dump(mode="json", exclude=exclude)
        return orjson.dumps(doc, option=orjson.OPT_INDENT_2).decode()


# -- execute ----------------------------------------------------------------------------


def execute(
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
    fsyncs every state change; see docs/batch-layout.md).

    Raises:
        StoreError: `output_dir` already exists.
    """
    return _run_main(
        aexecute(
            config,
            output_dir,
            allow_partial=allow_partial,
            skip_model_check=skip_model_check,
            view=view,
            durability=durability,
        )
    )


async def aexecute(
    config: BatchConfig | str | os.PathLike[str],
    output_dir: str | os.PathLike[str],
    *,
    allow_partial: bool = False,
    skip_model_check: bool = False,
    view: IO[str] | None = None,
    durability: Durability | None = None,
) -> BatchResult:
    """`execute`, for callers already in an event loop."""
    out = _absolute(output_dir)
    _refuse_existing(out)
    if durability is not None:
        if not isinstance(config, BatchConfig):
            config = load_config(config)
        config = _with_durability(config, durability)
    plan = await aplan(config, allow_partial=allow_partial, skip_model_check=skip_model_check)
    if not plan.ok:
        return BatchResult(launched=False, output_dir=None, plan=plan)
    if not isinstance(config, BatchConfig):
        config = load_config(config)
    batch_id = _batch_id(plan.batch or "batch")
    setup = Setup.build(config, batch_id, out)
    options = {"allow_partial": allow_partial, "skip_model_check": skip_model_check}
    enabled = [a for a in plan.assignments if a.enabled]
    store = _create(out, _meta(config, plan, setup, options), config, enabled)
    del plan  # its assignment table is the size of the batch; `enabled` is all we keep
    work: list[_Work] = [(a, 1, None) for a in enabled]
    return await _Runner(store, setup, "execute").run(work, len(enabled), view)


def _with_durability(config: BatchConfig, durability: Durability) -> BatchConfig:
    copy = config.model_copy(update={"durability": durability})
    copy._path = config.path
    return copy


def _create(
    out: str, meta: dict[str, Any], config: BatchConfig, enabled: list[Assignment]
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
    _files.fsync_dir(os.path.dirname(out))
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
    from ..models import parse_model, price_of, pricing_date

    env = plan.check("environment").details
    pricing = {}
    for model in dict.fromkeys(m for m in setup.models.values() if m is not None):
        api_model = parse_model(model).model
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
        "runner": _runner(),
        "plan": {
            "rollouts": plan.rollouts,
            "projected_concurrency": plan.projected_concurrency,
            "projected_cost_usd": plan.projected_cost_usd,
        },
    }


def _describe(exc: BaseException) -> str:
    """`Type: message` of the first real error inside any exception groups."""
    while isinstance(exc, BaseExceptionGroup) and exc.exceptions:
        exc = exc.exceptions[0]
    return f"{type(exc).__name__}: {str(exc).splitlines()[0] if str(exc) else ''}".rstrip(": ")


def _runner() -> dict[str, Any]:
    """This process as `reconcile` finds it again: pid, start time (clock ticks), host."""
    me = owner(os.getpid()) or f"{os.getpid()}-0"
    return {"pid": os.getpid(), "start_time": me.split("-")[1], "host": socket.gethostname()}


def _taskset_digest(setup: Setup) -> str:
    digest = hashlib.sha256()
    for row in setup.rows.values():
        digest.update(row)
        digest.update(b"\n")
    return digest.hexdigest()


# -- resume -----------------------------------------------------------------------------


def resume(
    output_dir: str | os.PathLike[str],
    *,
    retry_errors: bool = False,
    view: IO[str] | None = None,
    durability: Durability | None = None,
) -> BatchResult:
    """Continue the batch in `output_dir` (see `aresume`)."""
    return _run_main(
        aresume(output_dir, retry_errors=retry_errors, view=view, durability=durability)
    )


async def aresume(
    output_dir: str | os.PathLike[str],
    *,
    retry_errors: bool = False,
    view: IO[str] | None = None,
    durability: Durability | None = None,
) -> BatchResult:
    """Continue a batch: never redo a completed rollout, re-admit the rest.

    The config recorded in `batch.json` must be unchanged: its digest, the config
    file's current content (if the file is still there) and the taskset's rows. A
    rollout in flight when the runner died continues from its checkpoint when its
    substrate survived (an environment served elsewhere, which parked the session);
    otherwise it is recorded once as `interrupted`, in its phase. With `retry_errors`,
    failed and interrupted rollouts get a new attempt (the old one is kept on disk).
    `durability` overrides the recorded config's for this runner.

    Raises:
        StoreError: not a batch output, another runner has it, or the config changed.
    """
    out = _absolute(output_dir)
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
        work = _leftovers(store, setup, out, retry_errors)
    except BaseException:
        store.close()
        raise
    total = sum(1 for _ in _all_rows(out))
    return await _Runner(store, setup, "resume").run(work, total, view)


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
    )
    from ._reconcile import reconcile

    await reconcile(out, final=False)  # dead runners' folders, before anything starts
    setup = Setup.build(config, str(batch["batch_id"]), out, spent=_spent(out))
    if _taskset_digest(setup) != batch.get("taskset_digest"):
        raise StoreError(f"the taskset {config.taskset.source} changed since the batch started")
    return setup, plan


def _all_rows(out: str) -> Iterator[dict[str, Any]]:
    yield from list_rollouts(out, limit=None)


def _spent(out: str) -> float:
    """USD recorded so far, earlier attempts (moved aside by a retry) included."""
    spent = recorded_cost(out)
    for path in Path(out, "rollouts").glob("*/attempts/*/rollout.json"):
        with contextlib.suppress(OSError, orjson.JSONDecodeError):
            spent += orjson.loads(path.read_bytes()).get("cost") or 0.0
    return spent


def _leftovers(store: BatchStore, setup: Setup, out: str, retry_errors: bool) -> list[_Work]:
    """Queued rollouts, in-flight ones (adopted or recorded interrupted), retries."""
    work: list[_Work] = []
    for row in _all_rows(out):
        a = _assignment(row)
        status, attempt = row["status"], row["attempt"] or 1
        if status == "queued":
            work.append((a, attempt, None))
        elif status == "running":
            adopted = _adoptable(store, setup, a, attempt, row["phase"])
            if adopted is not None:
                work.append((a, attempt, adopted))
            elif retry_errors:
                work.append((a, attempt + 1, None))
        elif retry_errors and (status in ("failed", "interrupted")):
            work.append((a, attempt + 1, None))
    return work


def _assignment(row: dict[str, Any]) -> Assignment:
    return Assignment(
        rollout_id=row["id"],
        task=row["task"],
        agent=row["agent"],
        model=row["model"],
        repeat=row["repeat"],
        enabled=True,
    )


def _adoptable(
    store: BatchStore, setup: Setup, a: Assignment, attempt: int, phase: str | None
) -> dict[str, Any] | None:
    """The parked session and checkpoint to continue `a` from; otherwise record it
    `interrupted` (once) and return None."""
    rec = store.begin(a, attempt=attempt)
    session = rec.load_private("session.json")
    checkpoint = rec.load_private("checkpoint.json")
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


# -- the runner -------------------------------------------------------------------------


class _Runner:
    """Runs work items on a store with at most `max_concurrency` in flight."""

    def __init__(self, store: BatchStore, setup: Setup, mode: str) -> None:
        self.store = store
        self.setup = setup
        self.mode = mode
        self.config = setup.config
        self.timeouts = setup.config.timeouts.to_timeouts()
        self.tally: Tally | None = None
        self.stopped: str | None = None
        self.error: str | None = None
        self.ran = 0
        self.groups: GroupRewards | None = None

    async def run(self, work: list[_Work], total: int, view: IO[str] | None) -> BatchResult:
        store, setup = self.store, self.setup
        store.event("runner", **_runner(), mode=self.mode, work=len(work))
        self.tally = tally = Tally(total)
        if self.config.repeats >= 2:
            sizes = group_sizes(_group(a) for a, _, _ in work)
            self.groups = GroupRewards(store, sizes, self._earlier(work))
        for status, n in _final_counts(store.path).items():
            tally.preset(status, n)
        t0 = time.monotonic()
        try:
            stack = AsyncExitStack()
            try:
                await setup.open(stack)
                await self._view(stack, view)
                await self._drain(work)
            finally:
                await self._close(stack)
        except asyncio.CancelledError:
            self.stopped = "interrupted"
            store.event("interrupted", signal=_SIGNALS[-1] if _SIGNALS else None)
        except Exception as exc:  # the runner's own failure: what ran stays recorded
            self.stopped = "error"
            self.error = _describe(exc)
            store.event("runner_error", error=self.error)
        finally:
            wall = time.monotonic() - t0
            await self._reconcile()
            result = self._result(wall)
            store.event("finished", counts=result.counts, ran=result.ran, wall_s=wall)
            store.close()
        return result

    async def _close(self, stack: AsyncExitStack) -> None:
        """Stop the proxies, the live view and the runtime; a failure to stop is
        recorded, never allowed to lose the batch's result."""
        try:
            await stack.aclose()
        except Exception as exc:
            self.store.event("runtime_close_failed", error=f"{type(exc).__name__}: {exc}")

    async def _view(self, stack: AsyncExitStack, stream: IO[str] | None) -> None:
        if stream is None or self.tally is None:
            return
        from ._view import LiveView

        title = str(self.store.batch.get("name") or self.setup.batch_id)
        await stack.enter_async_context(LiveView(self.tally, stream=stream, title=title))

    async def _drain(self, work: list[_Work]) -> None:
        items = iter(work)

        async def worker() -> None:
            for a, attempt, adopted in items:
                if self.setup.budget.reached:
                    if self.stopped is None:
                        self.stopped = "batch_cost_cap"
                        self.store.event(
                            "cost_cap", spent=self.setup.budget.spent, cap=self.config.cost_cap
                        )
                    return
                await self._one(a, attempt, adopted)

        if self.config.executor.kind == "ray":
            return await self._drain_on_ray(work)
        n = min(self.config.max_concurrency, len(work))
        async with asyncio.TaskGroup() as tg:
            for _ in range(n):
                tg.create_task(worker())

    async def _drain_on_ray(self, work: list[_Work]) -> None:
        """`executor = "ray"`: whole rollouts on Ray shards, each recorded as it ends
        (phases are not streamed back; agents naming a model are refused by the plan)."""
        from ..engine import RayExecutor

        cfg = self.config.executor
        assert isinstance(cfg, RayExecutorConfig)
        executor = RayExecutor(
            cfg.address, shards=cfg.shards, concurrency=cfg.concurrency, resources=cfg.resources
        )
        by_agent: dict[str, list[_Work]] = {}
        for item in work:
            by_agent.setdefault(item[0].agent, []).append(item)
        async with asyncio.TaskGroup() as tg:
            for agent, items in by_agent.items():
                tg.create_task(self._on_ray(executor, agent, items))

    async def _on_ray(self, executor: Any, agent: str, items: list[_Work]) -> None:
        setup = self.setup
        pairs = [(setup.task(a.task), _group(a)) for a, _, _ in items]

        ended: list[tuple[Assignment, Any]] = []

        def finished(i: int, run: Any) -> None:
            a, attempt, _ = items[i]
            assert self.tally is not None
            recording = Recording(run, self.store.begin(a, attempt=attempt), self.tally)
            self.tally.move("queued", "running")
            recording.state = "running"
            self._finished(a, run, recording, adopted=False)
            ended.append((a, run))

        _ship_by_value(setup.agents[agent])
        await executor.run(
            pairs,
            setup.agents[agent],
            runtime=setup.runtime,
            job_id=setup.batch_id,
            timeout=self.timeouts,
            max_concurrent=self.config.max_concurrency,
            finished=finished,
        )
        for a, run in ended:  # the shards' runs, in the order they ended
            await self._grouped(a, run)

    async def _one(self, a: Assignment, attempt: int, adopted: dict[str, Any] | None) -> None:
        from ..agents import Run
        from ..engine._rollout import execute

        assert self.tally is not None
        setup = self.setup
        rec = self.store.begin(a, attempt=attempt)
        run = Run(
            setup.task(a.task),
            job_id=setup.batch_id,
            group_id=_group(a),
            trace_id=f"{a.rollout_id}.{attempt}",
        )
        recording = Recording(run, rec, self.tally, adoptable=setup.adoptable)
        adopt = None
        if adopted is not None:
            adopt = self._adoption(run, recording, adopted)
            self.store.event("continued", id=a.rollout_id, attempt=attempt)
        else:
            self.tally.move("queued", "starting")
        try:
            await execute(
                run,
                setup.agents[a.agent],
                runtime=setup.runtime,
                timeout=self.timeouts,
                proxy=setup.proxy_for(a.agent),
                judge=setup.judge,
                launch_retries=0 if adopt is not None else self.config.launch_retries,
                adopt=adopt,
            )
        except asyncio.CancelledError:
            recording.finish("interrupted")
            raise
        self._finished(a, run, recording, adopt is not None)
        await self._grouped(a, run)

    async def _grouped(self, a: Assignment, run: Any) -> None:
        """Group rewards and advantages once `run`'s group has ended (repeats >= 2)."""
        if self.groups is not None:
            await self.groups.ended(_group(a), a, run)

    def _earlier(self, work: list[_Work]) -> Earlier:
        """The members of a group that ended before this runner, from their records."""
        here = {a.rollout_id for a, _, _ in work}
        named = {_group(a): (a.task, a.agent) for a, _, _ in work}

        def earlier(key: str) -> list[Member]:
            task, agent = named[key]
            members: list[Member] = []
            for row in list_rollouts(self.store.path, task=task, agent=agent, limit=None):
                if row["id"] not in here:
                    a = _assignment(row)
                    record = read_rollout(self.store.path, a.rollout_id)["record"]
                    members.append((a, run_from_record(self.setup.task(task), key, record)))
            return members

        return earlier

    def _adoption(self, run: Any, recording: Recording, adopted: dict[str, Any]) -> Any:
        from ..engine import Adoption

        assert self.tally is not None
        session, checkpoint = adopted["session"], adopted["checkpoint"]
        run.restored = checkpoint
        recording.session = session
        recording.resume_turns()
        self.tally.move("queued", "running")
        recording.state = "running"
        target = session.get("target") or self.config.runtime.url  # type: ignore[union-attr]
        return Adoption(
            target=target,
            token=self.setup.server_token(),
            release=self.setup.release(target),
            session_id=session["session_id"],
            resume_token=session["resume_token"],
            prompt=session.get("prompt"),
            start_result=session.get("start_result") or {},
        )

    def _finished(self, a: Assignment, run: Any, recording: Recording, adopted: bool) -> None:
        status = "completed" if run.status == "completed" else "failed"
        lost = adopted and run.error is not None and run.error.phase == "connecting"
        if lost:  # the parked session expired or its server went away
            status = "interrupted"
        for launch, err in enumerate(run.launch_errors, 1):
            self.store.event(
                "launch_retry", id=a.rollout_id, attempt=launch, phase=err.phase,
                error=f"{err.type}: {err.message}",
            )  # fmt: skip
        recording.finish(status)
        self.ran += 1

    async def _reconcile(self) -> None:
        try:
            from ._reconcile import reconcile
        except ImportError:  # pragma: no cover - built alongside
            return
        try:
            report = await reconcile(self.store.path, final=True)
        except Exception as exc:
            self.store.event("reconcile_failed", error=f"{type(exc).__name__}: {exc}")
            return
        removed = report.get("removed") or {}
        if any(removed.values()) or report.get("errors"):
            self.store.event("reconciled", **report)

    def _result(self, wall: float) -> BatchResult:
        self.store.flush()
        counts = _counts(self.store.path)
        failures = list_rollouts(self.store.path, error_phase=["grading", "teardown"], limit=None)
        spent = self.setup.budget.spent if self.setup.proxies else _spent(self.store.path)
        return BatchResult(
            launched=True,
            output_dir=self.store.path,
            batch_id=self.setup.batch_id,
            counts=counts,
            ran=self.ran,
            evaluation_failed=sum(1 for r in failures if r["error_phase"] == "grading"),
            teardown_errors=sum(1 for r in failures if r["error_phase"] == "teardown"),
            stopped=self.stopped,
            error=self.error,
            signal=_SIGNALS[-1] if self.stopped == "interrupted" and _SIGNALS else None,
            wall_s=wall,
            cost_usd=spent if spent else None,
        )


def _group(a: Assignment) -> str:
    """A group: the repeats of one task by one agent entry (the runs' `group_id`)."""
    return f"{a.task}--{a.agent}"


def _ship_by_value(agent: Any) -> None:
    """Pickle a file-loaded agent's module by value: Ray workers cannot import it by
    name (it was loaded from a path, e.g. `agent.py:solve`)."""
    import sys

    import ray.cloudpickle

    module = sys.modules.get(getattr(agent, "__module__", "") or type(agent).__module__)
    if module is not None and module.__name__ not in ("builtins", "__main__"):
        spec = getattr(module, "__spec__", None)
        if spec is None or spec.origin is None or "site-packages" not in spec.origin:
            with contextlib.suppress(ValueError):  # already registered
                ray.cloudpickle.register_pickle_by_value(module)  # type: ignore[no-untyped-call]


def _counts(out: str) -> dict[str, int]:
    from ._read import count_rollouts

    return count_rollouts(out, by="status")


def _final_counts(out: str) -> dict[str, int]:
    counts = _counts(out)
    mapping = {"completed": "done", "failed": "failed", "interrupted": "interrupted"}
    return {mapping[s]: n for s, n in counts.items() if s in mapping and n}


def _run_main(coro: Any) -> BatchResult:
    """Run a batch coroutine as the program's main task; SIGINT/SIGTERM cancel it, so
    in-flight rollouts are recorded interrupted and the store is closed cleanly."""

    async def main() -> BatchResult:
        task = asyncio.current_task()
        loop = asyncio.get_running_loop()
        assert task is not None

        def interrupt(sig: signal.Signals) -> None:
            _SIGNALS.append(sig.name)
            task.cancel()

        for sig in (signal.SIGINT, signal.SIGTERM):
            with contextlib.suppress(NotImplementedError, RuntimeError, ValueError):
                loop.add_signal_handler(sig, interrupt, sig)  # fails off the main thread
        result: BatchResult = await coro
        return result

    try:
        import uvloop

        runner: Any = uvloop.run
    except ImportError:
        runner = asyncio.run
    return runner(main())  # type: ignore[no-any-return]
