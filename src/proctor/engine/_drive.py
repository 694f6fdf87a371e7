"""The rollout driver: `rollout()` runs one task end to end, `execute_run()` drives a
`Run` the caller made through its phases (DESIGN section 1)."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Awaitable, Callable, Sequence
from contextlib import AsyncExitStack
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from .._errors import RemoteError, RolloutTimeout, RuntimeLaunchError, SubstrateLost
from ..agents import JudgeEndpoint, Run
from ..channel import connect
from ..records import RunError
from ._deadline import Clock, Span
from ._held import Held
from ._timeouts import Timeouts
from ._users import open_user_model, renew_user_model
from ._watch import SubstrateWatch

if TYPE_CHECKING:
    from ..agents import Agent
    from ..proxy import InterceptionProxy, ModelLimits
    from ..records import Task
    from ..runtimes import RuntimeLike
    from ._events import RolloutObserver

__all__ = ["Adoption", "default_runtime", "execute_run", "rollout"]

log = logging.getLogger("proctor.engine")


async def rollout(
    task: Task,
    agent: Agent,
    *,
    runtime: RuntimeLike | None = None,
    job_id: str | None = None,
    group_id: str | None = None,
    timeout: Timeouts | float | None = None,  # noqa: ASYNC109 - a Timeouts value
    trace_id: str | None = None,
    proxy: InterceptionProxy | None = None,
    limits: ModelLimits | None = None,
    launch_retries: int = 0,
    judge: InterceptionProxy | None = None,
    user: InterceptionProxy | None = None,
) -> Run:
    """Run one task end to end and return its `Run`, graded or failed.

    Runtime, connection and task are stacked and always unwound, in reverse, within
    the teardown deadline, which the rollout deadline never cuts short. A failure
    anywhere becomes `run.error` (with its phase); only cancellation propagates, after
    cleanup. A run that fails after the task may have started cancels it first.

    An agent stopped by its own deadline (`Timeouts.agent`) or by a budget of its proxy
    session (a refused turn, whatever the agent did then) is still graded on what it
    left: `run.stop_reason` is `timeout` or the budget's name. A task with a
    `verifier` is then graded again by it (phase `verifying`; see `Run.verify`), on
    the same connection when the verifier names the same environment and no
    `runtime_config`, else on a fresh substrate from `runtime`.

    Args:
        task: the row to run.
        agent: acts on the run and leaves its answer in `run.trace.content`.
        runtime: the `Runtime` (default: the row's environment in this process).
        job_id: the job this run belongs to (default: a fresh id).
        group_id: shared by the repeats of one row (default: a fresh id).
        timeout: a `Timeouts`, or a number capping the rollout (see `Timeouts`).
        trace_id: the trace's id (default: a fresh id).
        proxy: an interception proxy; the run gets a session on it for the agent phase
            (`run.model_env` points a harness at it) and its turns land on the trace.
        limits: that session's budgets (default: the proxy's).
        launch_retries: fresh substrates to try when a launch fails before the agent
            starts (see `execute_run`).
        judge: an interception proxy for the task's graders: a session on it is open
            for the grading phase only, sent as `judge` when the task needs one; its
            turns land on the trace marked `data["judge"] = True` (and in `run.cost`).
        user: an interception proxy for the task's simulated users (`ModelUser`): when
            the environment serves a `user` capability, a session on it is open from
            `tasks.start` (sent as its `user` param) to teardown; its turns land on the
            trace marked `data["user"] = True` (and in `run.cost`).

    Returns:
        The run: `completed` with a grade, or `failed` with the phase that failed.

    Raises:
        asyncio.CancelledError: the rollout was cancelled (after its teardown).
    """
    run = Run(task, job_id=job_id, group_id=group_id, trace_id=trace_id)
    return await execute_run(
        run,
        agent,
        runtime=runtime,
        timeout=timeout,
        proxy=proxy,
        limits=limits,
        launch_retries=launch_retries,
        judge=judge,
        user=user,
    )


@dataclass(frozen=True, slots=True)
class Adoption:
    """A parked session to continue instead of launching a fresh substrate.

    The server parked it when the connection that started it dropped (a runner that
    died); `resume_token` is what its `hello` returned. The run keeps its `prompt` and
    `start_result` from before; the agent gets `run.restored`, if the caller set it.
    """

    target: str
    token: str | None = field(repr=False)
    session_id: str
    resume_token: str = field(repr=False)
    prompt: Any = None
    start_result: dict[str, Any] = field(default_factory=dict)
    release: Callable[[], Awaitable[None]] | None = None
    """Stops the adopted substrate at teardown (e.g. its container), if anything must."""
    died: asyncio.Future[str] | None = field(default=None, repr=False)
    """Resolves with the cause if the adopted substrate dies (as `Endpoint.died`)."""


async def execute_run(
    run: Run,
    agent: Agent,
    *,
    runtime: RuntimeLike | None = None,
    timeout: Timeouts | float | None = None,  # noqa: ASYNC109 - a Timeouts value
    proxy: InterceptionProxy | None = None,
    limits: ModelLimits | None = None,
    launch_retries: int = 0,
    adopt: Adoption | None = None,
    judge: InterceptionProxy | None = None,
    observers: Sequence[RolloutObserver] = (),
    user: InterceptionProxy | None = None,
) -> Run:
    """`rollout()` on a `Run` the caller made, its events told to `observers` (a batch
    records it; a distributed executor reports its phase).

    A launch that fails before the agent starts (provisioning, connecting, or
    `tasks.start` failing for any reason but the task's own error) is retried on a
    fresh substrate up to `launch_retries` times; each failure is kept in
    `run.launch_errors` and `run.launch_attempts` counts the launches. With `adopt`,
    the run continues a parked session instead (no launch, no `tasks.start`; a user
    model's new session goes to it with `tasks.user`).
    """
    deadlines = Timeouts.of(timeout).for_row(run.task.runtime_config)
    runtime = runtime if runtime is not None else default_runtime()
    task = asyncio.current_task()
    assert task is not None
    phases = _Phases(run, observers, Clock(run, deadlines.shortest, task))
    clock = phases.clock
    live: Held | None = None  # a launch that fails unwinds its own
    try:
        try:
            with clock.scope(deadlines.rollout):
                stack, died = await _launch(phases, runtime, deadlines, launch_retries, adopt, user)
                live = stack
                await _act(phases, agent, deadlines, stack, proxy, limits, died)
                await _grade(phases, deadlines, stack, judge, runtime)
        except BaseException:
            await _abandon(run, live, deadlines.teardown)
            raise
        with phases.within("teardown", deadlines.teardown):
            await stack.aclose()
    except asyncio.CancelledError as exc:
        run.fail(run.phase, exc)
        raise
    except RolloutTimeout as exc:
        run.fail(exc.phase, exc)
    except Exception as exc:
        run.fail(_phase_of(exc, run.phase), exc)
        log.debug("rollout %s failed in %s", run.slug, run.phase, exc_info=True)
    finally:
        clock.close()
        run.client = None
        run.ended_at = time.time()
    return run


class _Phases:
    """Moves a run from phase to phase, telling its observers first; holds the clock
    its deadlines run on."""

    __slots__ = ("clock", "observers", "run")

    def __init__(self, run: Run, observers: Sequence[RolloutObserver], clock: Clock) -> None:
        self.run = run
        self.observers = observers
        self.clock = clock

    def enter(self, phase: str) -> None:
        """Move to `phase`."""
        for observer in self.observers:
            observer.phase_changed(self.run, phase)
        self.run.phase = phase

    def within(self, phase: str, limit: float) -> Span:
        """Move to `phase`; returns its deadline's scope (`limit` seconds)."""
        for observer in self.observers:  # `enter`, inline: a call fewer per phase
            observer.phase_changed(self.run, phase)
        self.run.phase = phase
        return Span(self.clock, limit)


async def _launch(
    phases: _Phases,
    runtime: RuntimeLike,
    limits: Timeouts,
    retries: int,
    adopt: Adoption | None,
    user: InterceptionProxy | None = None,
) -> tuple[Held, asyncio.Future[str] | None]:
    """Bring up a substrate, connect and start the task; on a launch failure, tear it
    down and try a fresh one, at most `retries` more times. Returns the live stack and
    the substrate's `Endpoint.died`."""
    run = phases.run
    if retries < 0:
        raise ValueError("launch_retries must be >= 0")
    for attempt in range(1, retries + 2):
        run.launch_attempts = attempt
        stack = Held()
        try:
            if adopt is not None:
                await _adopt(phases, adopt, limits, stack, user)
                return stack, adopt.died
            return stack, await _provision(phases, runtime, limits, stack, user)
        except Exception as exc:
            if attempt > retries or adopt is not None or not _relaunchable(run, exc):
                await _abandon(run, stack, limits.teardown)
                run.client = None
                raise
            phase = exc.phase if isinstance(exc, RolloutTimeout) else run.phase
            run.launch_errors.append(RunError(phase, type(exc).__name__, str(exc)))
            log.debug("launch %d of %s failed in %s: %r", attempt, run.slug, phase, exc)
            await _abandon(run, stack, limits.teardown)
            run.client = None
            phases.enter("provisioning")
        except BaseException:
            await _abandon(run, stack, limits.teardown)
            run.client = None
            raise
    raise AssertionError("unreachable")  # pragma: no cover


def _relaunchable(run: Run, exc: Exception) -> bool:
    """A substrate failure, not the task's: its own `tasks.start` error is not retried."""
    phase = exc.phase if isinstance(exc, RolloutTimeout) else run.phase
    if phase in ("provisioning", "connecting"):
        return True
    return phase == "starting" and not isinstance(exc, RemoteError)


async def _provision(
    phases: _Phases,
    runtime: RuntimeLike,
    limits: Timeouts,
    stack: Held,
    user: InterceptionProxy | None = None,
) -> asyncio.Future[str] | None:
    run = phases.run
    phases.enter("provisioning")
    lease = runtime(run.task)
    endpoint = await lease.__aenter__()
    stack.lease = lease
    run.substrate = endpoint.entry
    # The phase deadline names "connecting" when it fires; connect() also stops by
    # itself after ready_timeout, with a ConnectTimeout saying what it last saw.
    with phases.within("connecting", limits.connect):
        link = connect(endpoint.target, ready_timeout=limits.connect, token=endpoint.token)
        run.client = await link.__aenter__()
        stack.link = link
    if user is not None:  # before tasks.start, which carries its endpoint
        open_user_model(run, user, stack)
    if limits.start is None:
        phases.enter("starting")
        await run.start()
    else:
        with phases.within("starting", limits.start):
            await run.start()
    return endpoint.died


async def _adopt(
    phases: _Phases,
    adopt: Adoption,
    limits: Timeouts,
    stack: Held,
    user: InterceptionProxy | None = None,
) -> None:
    run = phases.run
    if adopt.release is not None:  # in the lease's place: after the connection closes
        release = stack.lease = AsyncExitStack()
        release.push_async_callback(adopt.release)
    with phases.within("connecting", limits.connect):
        link = connect(
            adopt.target,
            ready_timeout=limits.connect,
            token=adopt.token,
            session_id=adopt.session_id,
            resume_token=adopt.resume_token,
        )
        run.client = await link.__aenter__()
        stack.link = link
        if user is not None:  # the task's users held the dead driver's session
            await renew_user_model(run, user, stack)
    run.start_result = dict(adopt.start_result)
    run.prompt = adopt.prompt
    run.status = "running"


async def _act(
    phases: _Phases,
    agent: Agent,
    limits: Timeouts,
    stack: Held,
    proxy: InterceptionProxy | None,
    budgets: ModelLimits | None,
    died: asyncio.Future[str] | None,
) -> None:
    """The agent phase, with its proxy session if any, cut short if the substrate dies."""
    run = phases.run
    if proxy is not None:  # opened first, so whoever hears the phase sees it
        trace = None if getattr(agent, "records_turns", False) else run.trace
        run.proxy_session = session = proxy.open_session(run.trace_id, limits=budgets, trace=trace)
        stack.callback(session.close)
    phases.enter("agent")
    try:
        with SubstrateWatch(run, died, phases.clock.task):
            if limits.agent is None:
                await agent(run)
            else:
                with Span(phases.clock, limits.agent):
                    await agent(run)
    except SubstrateLost:
        raise
    except Exception as exc:
        if not _stopped(run, exc):
            raise
        log.debug("agent of %s stopped (%s), graded anyway: %r", run.slug, run.stop_reason, exc)
    finally:
        if run.proxy_session is not None:  # a late request from the harness gets 409
            run.proxy_session.close()
            run.stop_reason = run.stop_reason or run.proxy_session.stop_reason


def _stopped(run: Run, exc: Exception) -> bool:
    """Whether the agent was stopped (its deadline, or a budget the proxy enforced)
    rather than crashed; sets `run.stop_reason` for the deadline."""
    if isinstance(exc, RolloutTimeout) and exc.phase == "agent":
        run.stop_reason = "timeout"
        return True
    return run.proxy_session is not None and run.proxy_session.stop_reason is not None


async def _grade(
    phases: _Phases,
    limits: Timeouts,
    stack: Held,
    judge: InterceptionProxy | None,
    runtime: RuntimeLike,
) -> None:
    """Grading, then the verifier's if the task names one; a judge session open for both."""
    run = phases.run
    phases.enter("grading")
    judging = None if judge is None else _Judging(run, judge)
    try:
        if limits.grade is None:
            await run.submit()
        else:
            with Span(phases.clock, limits.grade):
                await run.submit()
        if run.task.verifier is not None:
            await _verify(phases, run.task.verifier, limits, stack, runtime)
    finally:
        if judging is not None:
            judging.close()


class _Judging:
    """A session on the `judge` proxy for as long as grading lasts, its turns marked."""

    __slots__ = ("first", "run", "session")

    def __init__(self, run: Run, judge: InterceptionProxy) -> None:
        self.run = run
        self.first = len(run.trace.steps)
        self.session = session = judge.open_session(f"{run.trace_id}-judge", trace=run.trace)
        upstream = judge.upstreams.get("openai")
        model = None if upstream is None else upstream.model
        run.judge = JudgeEndpoint(session.base_url, session.secret, model)

    def close(self) -> None:
        run = self.run
        run.judge = None
        self.session.close()
        for step in run.trace.steps[self.first :]:
            if step.kind == "model_turn":
                step.data = {**(step.data or {}), "judge": True}


async def _verify(
    phases: _Phases, verifier: Task, limits: Timeouts, stack: Held, runtime: RuntimeLike
) -> None:
    """Grade the actor's grade with the task's verifier (HUD's verifier phase): on the
    actor's connection when it names the same environment and no runtime of its own."""
    run = phases.run
    phases.enter("verifying")
    client = run.client
    if client is None or verifier.env != run.task.env or verifier.runtime_config is not None:
        endpoint = await stack.enter_async_context(runtime(verifier))
        with phases.clock.scope(limits.connect):
            client = await stack.enter_async_context(
                connect(endpoint.target, ready_timeout=limits.connect, token=endpoint.token)
            )
    with phases.clock.scope(limits.grade):
        await run.verify(client)


def _phase_of(exc: Exception, phase: str) -> str:
    """The phase to blame: a lifecycle hook's own (`setup`, `finalize`), from the error
    the environment answered, else `phase`."""
    if isinstance(exc, RemoteError) and isinstance(exc.data, dict):
        hook = exc.data.get("phase")
        if hook in ("setup", "finalize"):
            return str(hook)
    return phase


async def _abandon(run: Run, stack: Held | None, limit: float) -> None:
    """Unwind a failed or cancelled rollout; never raises (the first failure wins).

    The task is cancelled explicitly: a dropped connection would only park it, and a
    shared server would keep it for the park TTL.
    """
    try:
        if run.client is not None and run.phase in ("starting", "agent", "grading", "verifying"):
            with contextlib.suppress(Exception):
                async with asyncio.timeout(limit / 2):
                    await run.client.cancel()
    finally:  # even if a second cancellation lands above, the substrate is stopped
        try:
            if stack is not None:
                async with asyncio.timeout(limit):
                    await stack.aclose()
        except Exception as exc:  # TimeoutError included
            log.debug("teardown of failed rollout %s also failed: %r", run.slug, exc)


def default_runtime() -> RuntimeLike:
    """Placement when none is given: serve each row's environment in this process."""
    return _InProcess()


class _InProcess:
    """Find each row's `Environment` among those defined in this process."""

    def __init__(self) -> None:
        from ..runtimes import LocalRuntime

        self._runtimes: dict[str, LocalRuntime] = {}

    def __call__(self, task: Task) -> contextlib.AbstractAsyncContextManager[Any]:
        from ..env import registered
        from ..runtimes import LocalRuntime

        rt = self._runtimes.get(task.env)
        if rt is None:
            env = registered(task.env)
            if env is None:
                raise RuntimeLaunchError(
                    f"no environment {task.env!r} is defined in this process; pass runtime="
                )
            rt = self._runtimes[task.env] = LocalRuntime(env)
        return rt(task)
