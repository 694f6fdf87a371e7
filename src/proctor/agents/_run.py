"""`Run`: one rollout's live session with the environment, then its record."""

from __future__ import annotations

import dataclasses
import os
import time
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, Literal

from .._errors import ChannelError, ProtocolError
from .._usererror import error_traceback, redact
from ..records import Grade, RunError, Step, Trace

if TYPE_CHECKING:
    from ..channel import EnvClient
    from ..env import Capability, WorkspaceDiff
    from ..proxy import ProxySession
    from ..records import Task

__all__ = ["Run", "RunStatus"]

RunStatus = Literal["pending", "running", "completed", "failed"]


@dataclasses.dataclass(frozen=True, slots=True)
class JudgeEndpoint:
    """An OpenAI-compatible endpoint the task's code may call (an interception-proxy
    session: the judge's, open for the grading phase only, or the user model's, open
    from `tasks.start` on); `api_key` is that session's secret."""

    base_url: str
    api_key: str = dataclasses.field(repr=False)
    model: str | None = None

    def to_params(self) -> dict[str, str]:
        """The `judge` param of `tasks.grade`."""
        params = {"base_url": self.base_url, "api_key": self.api_key}
        if self.model is not None:
            params["model"] = self.model
        return params


class Run:
    """One rollout of one task.

    While the agent works, `prompt`, `client` and `binding()` are live; the agent
    records steps on `trace` and puts its final answer in `trace.content`. After the
    rollout, `status` is `completed` with a `grade`, or `failed` with an `error` naming
    the phase (provisioning, connecting, starting, agent, grading, verifying). A teardown
    that fails after the grade keeps the run `completed` with its reward, the error (phase
    `teardown`) recorded beside it. A grade whose evaluation failed (`is_error`: a reward
    raised) still completes the run: `evaluation_failed` says so.

    With a verifier task, `grade` is the verifier's and `actor_grade` the actor's, and
    `verifier_trace` its steps. In a group, `group_rewards` holds the values of the
    environment's group rewards and `advantage` the reward minus the group's mean.
    `metrics` holds counters an agent kept (`ComputerAgent`: actions, invalid batches).
    When the task tracks a workspace, `workspace` is its `WorkspaceDiff` (what the agent
    created, modified and deleted there), taken off the grade.

    `phase` is where the rollout is: provisioning, connecting, starting, agent, grading,
    verifying, teardown (its driver moves it and tells the observers a batch or an
    executor registered; see `engine.execute_run`). Whoever records the run may set
    `on_checkpoint` (given the agent's `save_checkpoint` states) and `on_user_turn`
    (given each user-model turn's data as it lands on the trace); an agent that
    supports continuing reads `restored`, the last checkpoint, when it is set.
    """

    __slots__ = (
        "actor_grade",
        "advantage",
        "client",
        "ended_at",
        "error",
        "grade",
        "group_id",
        "group_rewards",
        "job_id",
        "judge",
        "launch_attempts",
        "launch_errors",
        "metrics",
        "on_checkpoint",
        "on_user_turn",
        "phase",
        "prompt",
        "proxy_session",
        "restored",
        "start_result",
        "started_at",
        "status",
        "stop_reason",
        "substrate",
        "task",
        "trace",
        "user",
        "verifier_trace",
        "workspace",
    )

    def __init__(
        self,
        task: Task,
        *,
        job_id: str | None = None,
        group_id: str | None = None,
        trace_id: str | None = None,
    ) -> None:
        self.task = task
        self.job_id = job_id or os.urandom(16).hex()
        self.group_id = group_id or os.urandom(16).hex()
        self.trace = Trace(trace_id or os.urandom(16).hex())
        self.prompt: Any = None
        self.start_result: dict[str, Any] = {}
        self.grade: Grade | None = None
        self.status: RunStatus = "pending"
        self.error: RunError | None = None
        self.on_checkpoint: Callable[[dict[str, Any]], None] | None = None
        self.on_user_turn: Callable[[dict[str, Any]], None] | None = None
        self.restored: dict[str, Any] | None = None
        self.phase = "provisioning"
        self.launch_attempts = 1
        self.launch_errors: list[RunError] = []
        self.client: EnvClient | None = None
        self.proxy_session: ProxySession | None = None
        # The runtime's way into the rollout's substrate (`Endpoint.entry`), if it can
        # host a harness there (`CommandAgent(placement="substrate")`).
        self.substrate: Any = None
        self.stop_reason: str | None = None
        self.judge: JudgeEndpoint | None = None
        # The run's user model (a proxy session), sent as `user` with `tasks.start`.
        self.user: JudgeEndpoint | None = None
        self.actor_grade: Grade | None = None
        self.verifier_trace: Trace | None = None
        self.group_rewards: dict[str, float] = {}
        self.advantage: float | None = None
        self.metrics: dict[str, float] = {}
        self.workspace: WorkspaceDiff | None = None
        self.started_at = time.time()
        self.ended_at: float | None = None

    def __repr__(self) -> str:
        outcome = f"reward={self.reward}" if self.error is None else f"error={self.error.phase}"
        return f"<Run {self.slug} {self.status} {outcome}>"

    @property
    def slug(self) -> str:
        """The task's slug."""
        return self.task.slug

    @property
    def trace_id(self) -> str:
        """The trace's id."""
        return self.trace.id

    @property
    def reward(self) -> float | None:
        """The graded reward, or None when the run failed or is not graded yet."""
        if self.grade is None or (self.error is not None and self.error.phase != "teardown"):
            return None
        return self.grade.reward

    @property
    def evaluation_failed(self) -> bool:
        """The run was graded but its evaluation failed (a reward or metric raised): not
        the same as a reward of 0."""
        return self.status == "completed" and self.grade is not None and self.grade.is_error

    @property
    def needs(self) -> frozenset[str]:
        """What the task's graders asked `tasks.start` to have sent with the grade."""
        return _needs(self.start_result)

    @property
    def answer(self) -> Any:
        """The agent's answer (`trace.content`)."""
        return self.trace.content

    @answer.setter
    def answer(self, value: Any) -> None:
        self.trace.content = value

    @property
    def model_env(self) -> dict[str, str]:
        """Environment variables pointing a harness at this run's proxy session.

        `OPENAI_BASE_URL`, `OPENAI_API_KEY`, `ANTHROPIC_BASE_URL`, `ANTHROPIC_API_KEY`;
        the key is the session's secret, never a real one. Empty without a proxy.
        """
        return self.proxy_session.env if self.proxy_session is not None else {}

    @property
    def usage(self) -> dict[str, int]:
        """Token usage summed over the trace's model turns."""
        total: dict[str, int] = {}
        for step in self.trace.steps:
            if step.kind == "model_turn" and step.data and isinstance(step.data.get("usage"), dict):
                for k, v in step.data["usage"].items():
                    if isinstance(v, int):
                        total[k] = total.get(k, 0) + v
        return total

    @property
    def cost(self) -> float | None:
        """Model cost (USD) summed over the trace's model turns; None if none was priced."""
        costs = [
            s.data["cost"]
            for s in self.trace.steps
            if s.kind == "model_turn" and s.data and isinstance(s.data.get("cost"), int | float)
        ]
        return sum(costs) if costs else None

    @property
    def duration(self) -> float | None:
        """Seconds from start to end, once ended."""
        return None if self.ended_at is None else self.ended_at - self.started_at

    @property
    def episode_bindings(self) -> dict[str, dict[str, Any]]:
        """Per-episode data the task published for its capabilities, by capability name."""
        bindings = self.start_result.get("bindings")
        return bindings if isinstance(bindings, dict) else {}

    def binding(self, name: str) -> Capability:
        """The capability `name`, routed to a local URL through this run's connection.

        Per-episode data the task published for it (e.g. a slot or a login) is merged
        into `params`.

        Raises:
            KeyError: the environment declares no such capability.
        """
        cap = self._live().binding(name)
        extra = self.episode_bindings.get(name)
        if extra:
            return dataclasses.replace(cap, params={**cap.params, **extra})
        return cap

    async def start(self) -> None:
        """Send `tasks.start` (with the `user` endpoint when the engine opened one)
        and record the prompt (the engine calls this)."""
        t0 = time.time()
        client = self.client if self.client is not None else self._live()
        extra = {} if self.user is None else {"user": self.user.to_params()}
        result = await client.start_task(self.task.id, self.task.args, **extra)
        if not isinstance(result, dict):
            raise ProtocolError(f"tasks.start returned {type(result).__name__}, not an object")
        self.start_result = result
        self.prompt = result.get("prompt")
        self.status = "running"
        now, steps = time.time(), self.trace.steps  # Trace.add's steps, made in place
        steps.append(Step("task", None, {"phase": "setup"}, t0, now))
        if self.prompt is not None:
            steps.append(Step("user", self.prompt, None, now, now))

    async def submit(self) -> Grade:
        """Send `tasks.grade` with `trace.content` and record the grade.

        With it go `stop_reason` when the run has one, the conversational `trace` when
        the task needs it, and the `judge` endpoint when the task needs one and the
        engine opened it.
        """
        t0 = time.time()
        params = self._grade_params(_needs(self.start_result))
        client = self.client if self.client is not None else self._live()
        result = await client.grade(self.trace.content, **params)
        result, workspace = _split_workspace(result)
        self.grade = _parse_grade(result)
        if workspace is not None:
            self._take_workspace(workspace)
        self.trace.steps.append(Step("task", result, {"phase": "evaluate"}, t0, time.time()))
        self.status = "completed"
        return self.grade

    async def verify(self, client: EnvClient) -> Grade:
        """Run the task's verifier on `client` and make its grade the run's.

        The verifier is started like any task and sent the actor's grade (its wire
        dict) as its answer; its steps go to `verifier_trace`, the actor's grade to
        `actor_grade`. From the start no actor grade stands as the run's: a failure
        here leaves the run ungraded.
        """
        verifier = self.task.verifier
        if verifier is None:
            raise ValueError(f"{self.slug}: the task names no verifier")
        if self.grade is None:
            raise ValueError(f"{self.slug}: the actor is not graded yet")
        self.actor_grade, self.grade = self.grade, None
        self.verifier_trace = trace = Trace(os.urandom(16).hex())
        t0 = time.time()
        started = await client.start_task(verifier.id, verifier.args)
        trace.add("task", started, start=t0, phase="setup", task=verifier.id)
        t0 = time.time()
        answer = self.actor_grade.to_wire()
        result = await client.grade(answer, **self._grade_params(_needs(started)))
        result = _split_workspace(result)[0]  # the actor's workspace diff stands
        self.grade = _parse_grade(result)
        trace.add("task", result, start=t0, phase="evaluate", task=verifier.id)
        return self.grade

    def _take_workspace(self, data: Any) -> None:
        """Keep the grade's workspace diff as `workspace`; a malformed one is a warning
        on the grade, never a lost grade."""
        from ..env import WorkspaceDiff

        assert self.grade is not None
        try:
            self.workspace = WorkspaceDiff.from_wire(data)
        except (ValueError, TypeError) as exc:
            info = self.grade.info
            info["proctor_warnings"] = [*info.get("proctor_warnings", ()), f"workspace: {exc}"]

    def _grade_params(self, needs: frozenset[str]) -> dict[str, Any]:
        """`tasks.grade`'s params beside the answer, per the contract."""
        params: dict[str, Any] = {}
        if self.stop_reason is not None:
            params["stop_reason"] = self.stop_reason
        if "trace" in needs:
            params["trace"] = self.trace.conversation()
        if "judge" in needs and self.judge is not None:
            params["judge"] = self.judge.to_params()
        return params

    def fail(self, phase: str, exc: BaseException) -> None:
        """Mark the run failed in `phase` with `exc` (the engine calls this).

        A teardown failure after the grade keeps the run `completed` and its reward.
        The error keeps `exc`'s traceback, after the environment server's for an error
        it answered (bounded; none for a cancellation); secret values are redacted from
        it and from the message.
        """
        if not (phase == "teardown" and self.grade is not None and self.status == "completed"):
            self.status = "failed"
        message = redact(str(exc) or type(exc).__name__)
        trace = error_traceback(exc) if isinstance(exc, Exception) else None
        self.error = RunError(phase, type(exc).__name__, message, trace)

    def save_checkpoint(self, state: dict[str, Any]) -> None:
        """Hand the model-visible state to continue from to whoever records this run.

        A no-op unless a recorder set `on_checkpoint`; `state` must be JSON-able.
        """
        if self.on_checkpoint is not None:
            self.on_checkpoint(state)

    def to_dict(self) -> dict[str, Any]:
        """The JSON row for this run (task, grade, error, trace, timing); `actor_grade`,
        `verifier_trace`, `group_rewards`, `advantage` and `metrics` only when set."""
        row = self._row()
        if self.actor_grade is not None:
            row["actor_grade"] = self.actor_grade.to_dict()
        if self.verifier_trace is not None:
            row["verifier_trace"] = self.verifier_trace.to_dict()
        if self.group_rewards:
            row["group_rewards"] = dict(self.group_rewards)
        if self.advantage is not None:
            row["advantage"] = self.advantage
        if self.metrics:
            row["metrics"] = dict(self.metrics)
        return row

    def _row(self) -> dict[str, Any]:
        grade = self.grade
        return {
            "task": self.task.model_dump(mode="json", exclude_none=True),
            "slug": self.slug,
            "job_id": self.job_id,
            "group_id": self.group_id,
            "trace_id": self.trace_id,
            "status": self.status,
            "reward": self.reward,
            "prompt": self.prompt,
            "grade": None if grade is None else grade.to_dict(),
            "error": None
            if self.error is None
            else {
                "phase": self.error.phase,
                "type": self.error.type,
                "message": self.error.message,
                "traceback": self.error.traceback,
            },
            "stop_reason": self.stop_reason,
            "launch_attempts": self.launch_attempts,
            "usage": self.usage,
            "cost": self.cost,
            "started_at": self.started_at,
            "ended_at": self.ended_at,
            "trace": self.trace.to_dict(),
        }

    def _live(self) -> EnvClient:
        if self.client is None:
            raise ChannelError("this run has no live connection")
        return self.client


def _needs(start_result: Any) -> frozenset[str]:
    needs = start_result.get("needs") if isinstance(start_result, dict) else None
    return frozenset(n for n in needs if isinstance(n, str)) if isinstance(needs, list) else _NONE


_NONE: frozenset[str] = frozenset()


def _split_workspace(result: Any) -> tuple[Any, Any]:
    """A `tasks.grade` result without its `workspace` key (kept off the trace: it can be
    large), and that key's value (None when absent)."""
    if not isinstance(result, dict) or "workspace" not in result:
        return result, None
    rest = dict(result)
    return rest, rest.pop("workspace")


def _parse_grade(result: dict[str, Any]) -> Grade:
    try:
        return Grade.from_wire(result)
    except (ValueError, AttributeError, TypeError) as exc:
        raise ProtocolError(f"tasks.grade returned a bad result: {exc}") from None
