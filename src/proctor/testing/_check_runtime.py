"""`check_runtime`: the `Runtime` contract, executable."""

from __future__ import annotations

import asyncio
import contextlib
import functools
import json
import os
import shutil
import tempfile
import time
from collections.abc import AsyncIterator, Callable
from contextlib import AbstractAsyncContextManager
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from .._errors import ChannelError, RemoteError
from ..channel._client import connect, dialer_for
from ..engine import Timeouts, rollout
from ..records import Task
from ..runtimes import Endpoint, UrlRuntime
from .conformance_env import process_identity, starttime

if TYPE_CHECKING:
    from ..agents import Agent, Run
    from ..runtimes import RuntimeLike

__all__ = ["RUNTIME_CHECKS", "RuntimeReport", "check_runtime"]

RUNTIME_CHECKS: tuple[str, ...] = (
    "reachable",
    "graded",
    "overlapping",
    "agent error",
    "start timeout",
    "rollout timeout",
    "cancelled in agent",
    "cancelled while provisioning",
)
"""The checks `check_runtime` runs, in order: a runtime that passes lists them all."""

_SETTLE = 3.0  # seconds markers and processes get to settle after a runtime exits


@dataclass
class RuntimeReport:
    """What `check_runtime` verified.

    `checks` lists the scenarios that passed; `notes` says what could not be observed
    (for example markers, when the substrate does not share this machine's files).
    """

    checks: list[str] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)


async def check_runtime(
    runtime: RuntimeLike,
    task: Task,
    *,
    agent: Agent | None = None,
    shared: bool | None = None,
    timeout: float = 60.0,  # noqa: ASYNC109 - a per-check budget, not one deadline
) -> RuntimeReport:
    """Check that a runtime brings the conformance environment up and always down.

    `task` is a row of the conformance environment (`conformance_env.echo(text=...)`,
    with whatever `runtime_config` the runtime needs); the checks derive their own
    rows from it. In order: the endpoint comes up and answers connect + hello +
    tasks.list (in-process endpoints over `tcp_url()` too), and refuses a hello
    without its token when it has one; a rollout is graded, and
    two overlapping ones; then the substrate is torn down after a graded rollout, an
    agent exception, a start timeout, a rollout timeout, and cancellation of the
    rollout while the agent works and while the substrate comes up.

    Torn down means: every task the environment started was closed (its `finally`
    ran); no child process of ours is left; and unless the runtime is `shared`, every
    endpoint it yielded refuses connections, the environment's shutdown hooks ran and
    its process is gone. Markers and processes are checked when the substrate shares
    this machine's files and pid namespace (see `RuntimeReport.notes`).

    Args:
        runtime: the runtime under test.
        task: a row of the conformance environment.
        agent: solves the echo rows of graded rollouts (default: echo the prompt).
        shared: the endpoint outlives each rollout, as a server run elsewhere does;
            default: True for `UrlRuntime(url)`.
        timeout: seconds each scenario may take, teardown included.

    Returns:
        The checks that passed and anything that could not be observed.

    Raises:
        AssertionError: a check failed; the message names it and what was left behind.
    """
    checker = _Checker(runtime, task, agent, shared, timeout)
    try:
        await checker.run()
    finally:
        shutil.rmtree(checker.root, ignore_errors=True)
    return checker.report


class _Probe:
    """Wraps the runtime: records each endpoint it yields and when it is entered."""

    def __init__(self, inner: RuntimeLike) -> None:
        self.inner = inner
        self.endpoints: list[Endpoint] = []
        self.urls: list[str] = []  # loopback listeners opened with tcp_url()
        self.entered = asyncio.Event()

    def __call__(self, task: Task) -> AbstractAsyncContextManager[Endpoint]:
        return self._enter(task)

    @contextlib.asynccontextmanager
    async def _enter(self, task: Task) -> AsyncIterator[Endpoint]:
        self.entered.set()
        async with self.inner(task) as endpoint:
            self.endpoints.append(endpoint)
            yield endpoint


class _Checker:
    def __init__(
        self,
        runtime: RuntimeLike,
        task: Task,
        agent: Agent | None,
        shared: bool | None,
        timeout: float,
    ) -> None:
        self.runtime = runtime
        self.base = task
        self.agent: Agent = agent if agent is not None else _Echo()
        self.shared = isinstance(runtime, UrlRuntime) if shared is None else shared
        self.timeout = timeout
        self.limits = Timeouts(connect=timeout / 2, teardown=timeout / 2)
        self.root = Path(tempfile.mkdtemp(prefix="proctor-check-"))
        self.report = RuntimeReport()
        self.seen_markers = False
        self.ready_after = 0.0  # seconds from rollout start to the agent, measured

    async def run(self) -> None:
        await self.reachable()
        await self.graded()
        await self.overlapping()
        await self.agent_error()
        await self.start_timeout()
        await self.rollout_timeout()
        await self.cancel_in_agent()
        await self.cancel_in_provisioning()
        if not self.seen_markers:
            self.report.notes.append(
                "the environment left no markers in this machine's files: task closing, "
                "shutdown hooks and its process were not checked"
            )

    def fail(self, check: str, what: str) -> AssertionError:
        return AssertionError(f"check_runtime({self.runtime!r}) [{check}]: {what}")

    # -- scenarios ---------------------------------------------------------------------

    async def reachable(self) -> None:
        async with self.scenario("reachable") as sc, sc.probe(sc.task("echo", text="ping")) as ep:
            if not isinstance(ep, Endpoint):
                raise self.fail("reachable", f"yielded {ep!r}, not an Endpoint")
            targets: list[Any] = [ep.target]
            if ep.server is not None:
                url = await ep.tcp_url()
                sc.probe.urls.append(url)
                targets.append(url)
            for target in targets:
                await self.hello(target, ep.token)
            if ep.token is not None and ep.server is None:
                await self.refuses_strangers(ep.url)

    async def refuses_strangers(self, url: str) -> None:
        """An endpoint that has a token must refuse a connection without it."""
        try:
            async with connect(url, ready_timeout=self.timeout / 2):
                pass
        except RemoteError as exc:
            if "unauthorized" in str(exc):
                return
            raise self.fail("reachable", f"{url} refused hello without its token: {exc}") from exc
        except (ChannelError, OSError):
            return  # refused at connect
        raise self.fail("reachable", f"{url} has a token but answered hello without it")

    async def hello(self, target: Any, token: str | None = None) -> None:
        async with connect(target, ready_timeout=self.timeout / 2, token=token) as client:
            assert client.manifest is not None
            if client.manifest.env_name != self.base.env:
                raise self.fail(
                    "reachable",
                    f"{client.url} serves {client.manifest.env_name!r}, not {self.base.env!r}",
                )
            ids = {t.get("id") for t in await client.list_tasks()}
            if not {"echo", "slow"} <= ids:
                raise self.fail("reachable", f"not the conformance environment: tasks {ids}")

    async def graded(self) -> None:
        async with self.scenario("graded") as sc:
            timed = _Timed(self.agent)
            t0 = time.monotonic()
            run = await self.rollout(sc, "echo", timed, text="graded")
            self.expect_graded("graded", run)
            self.ready_after = (timed.started or t0) - t0

    async def overlapping(self) -> None:
        async with self.scenario("overlapping") as sc:
            runs = await asyncio.gather(
                self.rollout(sc, "echo", self.agent, text="first"),
                self.rollout(sc, "echo", self.agent, text="second"),
            )
            for run in runs:
                self.expect_graded("overlapping", run)

    async def agent_error(self) -> None:
        async with self.scenario("agent error") as sc:
            run = await self.rollout(sc, "echo", _Raise(), text="boom")
            self.expect_failed("agent error", run, "agent", "RuntimeError")

    async def start_timeout(self) -> None:
        async with self.scenario("start timeout") as sc:
            limits = Timeouts(start=0.2, connect=self.timeout / 2, teardown=self.timeout / 2)
            run = await self.rollout(sc, "slow", self.agent, limits, seconds=3600)
            self.expect_failed("start timeout", run, "starting", "RolloutTimeout")

    async def rollout_timeout(self) -> None:
        # Long enough to reach the agent (3x the measured way there), short for a test.
        limit = round(max(0.5, 3 * self.ready_after + 0.3), 2)
        async with self.scenario("rollout timeout") as sc:
            limits = Timeouts(rollout=limit, connect=self.timeout / 2, teardown=self.timeout / 2)
            run = await self.rollout(sc, "echo", _Block(), limits, text="late")
            self.expect_failed("rollout timeout", run, None, "RolloutTimeout")

    async def cancel_in_agent(self) -> None:
        async with self.scenario("cancelled in agent") as sc:
            agent = _Block()
            await self.cancelled(sc, agent.working.wait(), agent)

    async def cancel_in_provisioning(self) -> None:
        async with self.scenario("cancelled while provisioning") as sc:

            async def soon() -> None:
                await sc.probe.entered.wait()
                await asyncio.sleep(self.ready_after / 3)

            await self.cancelled(sc, soon(), _Block())

    # -- helpers -------------------------------------------------------------------------

    async def rollout(
        self,
        sc: _Scenario,
        template: str,
        agent: Agent,
        limits: Timeouts | None = None,
        **args: Any,
    ) -> Run:
        return await rollout(
            sc.task(template, **args), agent, runtime=sc.probe, timeout=limits or self.limits
        )

    async def cancelled(self, sc: _Scenario, when: Any, agent: Agent) -> None:
        job = asyncio.create_task(self.rollout(sc, "echo", agent, text="cancel me"))
        trigger = asyncio.ensure_future(when)
        await asyncio.wait([job, trigger], return_when=asyncio.FIRST_COMPLETED)
        trigger.cancel()
        job.cancel()
        await asyncio.wait([job])
        if not job.cancelled():
            run = job.result()
            raise self.fail(sc.name, f"the cancelled rollout returned {run!r} instead of raising")

    def expect_graded(self, check: str, run: Run) -> None:
        if run.status != "completed" or run.reward != 1.0:
            raise self.fail(check, f"expected a graded run with reward 1.0, got {_describe(run)}")

    def expect_failed(self, check: str, run: Run, phase: str | None, error: str) -> None:
        err = run.error
        if (
            run.status != "failed"
            or err is None
            or err.type != error
            or (phase is not None and err.phase != phase)
        ):
            where = f" in phase {phase!r}" if phase else ""
            raise self.fail(check, f"expected a run failed with {error}{where}: {_describe(run)}")

    @contextlib.asynccontextmanager
    async def scenario(self, name: str) -> AsyncIterator[_Scenario]:
        folder = self.root / name.replace(" ", "-")
        folder.mkdir()
        sc = _Scenario(name, folder, _Probe(self.runtime), self.base)
        before = _children()
        deadline = asyncio.timeout(self.timeout)
        try:
            async with deadline:
                yield sc
        except AssertionError:
            raise
        except Exception as exc:
            if isinstance(exc, TimeoutError) and deadline.expired():
                raise self.fail(name, f"did not finish within {self.timeout:g}s") from None
            raise self.fail(name, f"{type(exc).__name__}: {exc}") from exc
        await self.torn_down(sc, before)
        self.report.checks.append(name)

    # -- teardown evidence ------------------------------------------------------------------

    async def torn_down(self, sc: _Scenario, before: dict[int, int | None]) -> None:
        if not self.shared:
            for target in [*(e.target for e in sc.probe.endpoints), *sc.probe.urls]:
                if await _accepts(target):
                    raise self.fail(sc.name, f"{_label(target)} still accepts connections")
        starts = _read_markers(sc.folder, ".start")
        if starts:
            self.seen_markers = True
        for name in starts:
            closed = sc.folder / f"{name}.closed"
            if not await _eventually(closed.exists):
                raise self.fail(sc.name, "a task was never closed (its `finally` did not run)")
        if not self.shared:
            await self.stopped(sc, starts)
        left = await _eventually_none(lambda: _new_children(before))
        if left:
            raise self.fail(sc.name, f"left child processes running: {left}")

    async def stopped(self, sc: _Scenario, starts: dict[str, dict[str, Any]]) -> None:
        me = process_identity()
        for info in starts.values():
            shutdown = sc.folder / f"env-{info.get('instance')}.shutdown"
            if not await _eventually(shutdown.exists):
                raise self.fail(sc.name, "the environment's shutdown hooks did not run")
            pid, started = info.get("pid"), info.get("starttime")
            if info.get("pidns") != me["pidns"] or me["pidns"] is None or pid == me["pid"]:
                continue
            if await _eventually_none(functools.partial(_alive, pid, started)):
                raise self.fail(sc.name, f"the environment's process {pid} is still there")


@dataclass
class _Scenario:
    name: str
    folder: Path
    probe: _Probe
    base: Task

    def task(self, template: str, **args: Any) -> Task:
        """A row of the base task's environment, marking into this scenario's folder."""
        return Task(
            env=self.base.env,
            id=template,
            args={**args, "marker": str(self.folder)},
            runtime_config=self.base.runtime_config,
        )


# -- agents ---------------------------------------------------------------------------------


class _Echo:
    async def __call__(self, run: Run) -> None:
        run.trace.content = run.prompt
        run.trace.add("assistant", run.prompt)


class _Timed:
    def __init__(self, agent: Agent) -> None:
        self.agent = agent
        self.started: float | None = None

    async def __call__(self, run: Run) -> None:
        self.started = time.monotonic()
        await self.agent(run)


class _Raise:
    async def __call__(self, run: Run) -> None:
        raise RuntimeError("check_runtime: this agent fails on purpose")


class _Block:
    def __init__(self) -> None:
        self.working = asyncio.Event()

    async def __call__(self, run: Run) -> None:
        self.working.set()
        await asyncio.Event().wait()


# -- evidence -----------------------------------------------------------------------------


def _describe(run: Run) -> str:
    if run.error is not None:
        return f"{run.status} in {run.error.phase}: {run.error.type}: {run.error.message}"
    return f"{run.status}, reward {run.reward}"


def _label(target: Any) -> str:
    if isinstance(target, str):
        return target
    return f"the in-process server of {getattr(target.env, 'name', '?')!r}"


async def _accepts(target: Any) -> bool:
    dial, _ = dialer_for(target)
    try:
        async with asyncio.timeout(2.0):
            transport = await dial(asyncio.Protocol)
    except (OSError, TimeoutError):
        return False
    transport.close()
    return True


def _read_markers(folder: Path, suffix: str) -> dict[str, dict[str, Any]]:
    out: dict[str, dict[str, Any]] = {}
    for path in sorted(folder.glob(f"task-*{suffix}")):
        with contextlib.suppress(OSError, ValueError):
            out[path.name.removesuffix(suffix)] = json.loads(path.read_text())
    return out


async def _eventually(check: Callable[[], bool]) -> bool:
    """True once `check()` holds, polling until the settle time is up."""
    deadline = time.monotonic() + _SETTLE
    while not check():
        if time.monotonic() > deadline:
            return False
        await asyncio.sleep(0.02)
    return True


async def _eventually_none(find: Callable[[], Any]) -> Any:
    """`find()` once it comes back empty, else its last value after the settle time."""
    found = find()
    deadline = time.monotonic() + _SETTLE
    while found and time.monotonic() < deadline:
        await asyncio.sleep(0.02)
        found = find()
    return found


def _children() -> dict[int, int | None]:
    """Our child processes (pid to start time), from `/proc`; empty where it is missing."""
    me = str(os.getpid())
    out: dict[int, int | None] = {}
    with contextlib.suppress(OSError):
        for entry in os.scandir("/proc"):
            if not entry.name.isdigit():
                continue
            try:
                stat = Path(entry.path, "stat").read_text()
            except OSError:
                continue
            fields = stat[stat.rindex(")") + 2 :].split()
            if fields[1] == me:  # fields[0] is the state, fields[1] the parent pid
                out[int(entry.name)] = int(fields[19])
    return out


def _new_children(before: dict[int, int | None]) -> list[str]:
    left = []
    for pid, started in _children().items():
        if before.get(pid, -1) != started:
            left.append(f"{pid} ({_cmdline(pid)})")
    return left


def _cmdline(pid: int) -> str:
    try:
        raw = Path(f"/proc/{pid}/cmdline").read_bytes()
    except OSError:
        return "?"
    return raw.replace(b"\0", b" ").decode(errors="replace").strip()


def _alive(pid: Any, started: Any) -> bool:
    """Process `pid` still exists (running or unreaped) and is the one that marked."""
    return isinstance(pid, int) and started is not None and starttime(pid) == started
