"""Binding one `Run` to its `RolloutRecorder`: phases, model turns, checkpoints, outcome."""

from __future__ import annotations

import hashlib
import os
from collections.abc import Iterable
from typing import TYPE_CHECKING, Any

import orjson

from ..proxy import Frames
from ..store import JsonlReader
from ._tally import Tally

if TYPE_CHECKING:
    from ..agents import Run
    from ..records import Trace
    from ..store import RolloutRecorder

__all__ = ["Recording", "state_of"]

_STATE = {
    "provisioning": "starting",
    "connecting": "starting",
    "starting": "starting",
    "agent": "running",
    "grading": "grading",
    "verifying": "grading",
    "teardown": "grading",
}
_INLINE_STEPS = 4  # a trace with more steps goes to trace.jsonl, not into the record


def state_of(phase: str) -> str:
    """The live-view state of a rollout in `phase`."""
    return _STATE.get(phase, "starting")


class Recording:
    """Everything one rollout attempt writes while it runs.

    `session` (set for a parked session being continued) is what `session.json` holds.
    """

    def __init__(
        self,
        run: Run,
        rec: RolloutRecorder,
        tally: Tally,
        *,
        session: dict[str, Any] | None = None,
        adoptable: bool = False,
    ) -> None:
        self.run = run
        self.rec = rec
        self.tally = tally
        self.state = "starting"
        self.adoptable = adoptable
        self.session = session
        self.base_turns = 0
        self.base_usage: dict[str, int] = {}
        self.base_cost = 0.0
        self.turns: dict[int, tuple[dict[str, Any], float]] = {}
        self.told = 0.0  # the cost told to the tally turn by turn (the proxy's, a user's)
        self.context = _Context()
        run.on_checkpoint = rec.save_checkpoint
        run.on_user_turn = self._user_turn

    def phase_changed(self, run: Run, phase: str) -> None:
        """The rollout's driver moves it to `phase` (a `RolloutObserver`)."""
        if self.rec.record.get("phase") != phase:  # (begin said `provisioning` already)
            self.rec.update(write=False, phase=phase)
        state = state_of(phase)
        if state != self.state:
            self.tally.move(self.state, state)
            self.state = state
        if phase == "agent":
            self._entered_agent(run)

    def _entered_agent(self, run: Run) -> None:
        session = run.proxy_session
        if session is not None:
            session.on_turn = self._turn
            session.frames = Frames(self.rec.add_frame)
        if self.adoptable and self.session is None and run.client is not None:
            manifest = run.client.manifest
            if manifest is not None and manifest.resume_token:
                self.session = {
                    "target": run.client.url,
                    "session_id": manifest.session_id,
                    "resume_token": manifest.resume_token,
                    "prompt": run.prompt,
                    "start_result": run.start_result,
                }
                self.rec.save_private("session.json", self.session)
        # Kept for the record's one write at the end: a record rewritten here would
        # cost a rename over an existing file per rollout (the slowest write there is).
        self.rec.record["prompt"] = run.prompt

    def resume_turns(self) -> None:
        """Count the model turns recorded before this runner took over (a continued
        rollout): new turns are numbered after them, their usage and cost added, and
        so are the user model's (`user_turns.jsonl`, one line a turn)."""
        last: dict[int, dict[str, Any]] = {}
        for line in JsonlReader(os.path.join(self.rec.folder, "model_turns.jsonl")):
            if isinstance(line.get("turn"), int):
                last[line["turn"]] = line  # a retried turn's later line wins
        users = JsonlReader(os.path.join(self.rec.folder, "user_turns.jsonl"))
        self.base_turns = max(last, default=0)
        self.base_usage, self.base_cost = _sum(
            (t.get("usage") or {}, t.get("cost")) for t in (*last.values(), *users)
        )

    def _user_turn(self, data: dict[str, Any]) -> None:
        """A user-model turn, as it lands on the trace: kept in `user_turns.jsonl` (its
        request stays on the trace alone), its cost told to the tally now."""
        self.rec.append_user_turn({k: v for k, v in data.items() if k not in _NOT_KEPT})
        cost = data.get("cost")
        if isinstance(cost, int | float) and cost:
            self.told += cost
            self.tally.add_cost(cost)

    def _turn(self, turn: dict[str, Any]) -> None:
        number = self.base_turns + int(turn["turn"])
        line = {k: v for k, v in turn.items() if k not in ("request", "message")}
        request = orjson.dumps(turn.get("request"), option=orjson.OPT_SORT_KEYS)
        line["turn"] = number
        line["request_sha256"] = hashlib.sha256(request).hexdigest()
        line["messages"] = len((turn.get("request") or {}).get("messages") or ())
        line["context"] = self.context.delta(number, turn.get("request"))
        self.rec.append_turn(line)
        cost = turn.get("cost") or 0.0
        previous = self.turns.get(number)
        self.turns[number] = (turn.get("usage") or {}, cost)
        delta = cost - (previous[1] if previous else 0.0)
        self.told += delta
        self.tally.add_cost(delta)

    def finish(self, status: str) -> str:
        """Write the outcome; returns the final live-view state."""
        run = self.run
        run.on_user_turn = None  # its bound method held this recording: no cycle left
        fields = _outcome(run)
        fields.update(self._usage())
        if self.session is not None:
            self.rec.drop_private("session.json")
        trace = _trace(run)
        if len(run.trace.steps) > _INLINE_STEPS:
            for step in trace["steps"]:
                self.rec.append_step(step)
        else:
            fields["trace"] = trace
        harness = _harness_output(run)
        if harness:
            self.rec.log(harness)
        if run.error is not None and run.error.phase in ("grading", "verifying"):
            self.rec.set_evaluation({"status": "failed", "error": fields["error"]})
        elif run.evaluation_failed and run.grade is not None:  # a grader raised: not a 0
            self.rec.set_evaluation({"status": "failed", "errors": run.grade.info.get("errors")})
        if run.workspace is not None:
            self.rec.save_workspace(run.workspace.to_wire())
        self.rec.finish(status, **fields)
        final = {"completed": "done", "failed": "failed"}.get(status, "interrupted")
        self.tally.move(self.state, final)
        # The tally heard the turns told turn by turn, and an earlier runner's were
        # its: the rest of this runner's (a judge's, a Python agent's) is told now.
        late = (fields.get("cost") or 0.0) - self.base_cost - self.told
        self.tally.ended(reward=run.reward, cost=late if late > 1e-12 else None)
        self.state = final
        return final

    def _usage(self) -> dict[str, Any]:
        """Usage and cost: the proxy's turns when there was one, else the trace's; a
        judge's and a user model's turns (on the trace only) count either way, and so
        do the turns an earlier runner recorded (`resume_turns`)."""
        if not self.turns and self.base_turns == 0:
            usage, cost = self.run.usage, self.run.cost
            if self.base_usage or self.base_cost:  # a user model's, before a kill
                usage, cost = _sum([(self.base_usage, self.base_cost), (usage, cost)])
            return {"usage": usage or None, "cost": cost}
        judged = [
            (step.data.get("usage") or {}, step.data.get("cost"))
            for step in self.run.trace.steps
            if step.kind == "model_turn"
            and step.data
            and (step.data.get("judge") or step.data.get("user"))
        ]
        usage, cost = _sum([(self.base_usage, self.base_cost), *self.turns.values(), *judged])
        return {"usage": usage, "cost": cost}


class _Context:
    """Each turn's request history as a delta on the previous turn's (`context` in a
    `model_turns.jsonl` line): how many leading messages it kept, the new ones after
    them, `reset` when it did not keep them all (compacted, or another conversation),
    and the request's `tools`/`system`/`instructions` when they changed (null: gone)."""

    def __init__(self) -> None:
        self.last: tuple[int, list[Any], dict[str, Any]] = (0, [], {})
        self.before: tuple[int, list[Any], dict[str, Any]] = (0, [], {})

    def delta(self, number: int, request: Any) -> dict[str, Any]:
        body = request if isinstance(request, dict) else {}
        history = _history(body)
        extras = {k: body[k] for k in _EXTRAS if k in body}
        if number == self.last[0]:  # a retried turn: relative to the turn before it
            self.last = self.before
        base_number, base, base_extras = self.last
        if base_number != number - 1:
            base, base_extras = [], {}
        kept = _common(base, history)
        out: dict[str, Any] = {"kept": kept, "new": history[kept:]}
        if kept < len(base):
            out["reset"] = True
        out.update({k: extras.get(k) for k in _EXTRAS if base_extras.get(k) != extras.get(k)})
        self.before, self.last = self.last, (number, history, extras)
        return out


_EXTRAS = ("tools", "system", "instructions")


def _history(body: dict[str, Any]) -> list[Any]:
    """The conversation a request carries: chat and Anthropic `messages`, Responses
    `input` (a string is one user message)."""
    history = body.get("messages", body.get("input"))
    if isinstance(history, str):
        return [{"role": "user", "content": history}]
    return list(history) if isinstance(history, list) else []


def _common(a: list[Any], b: list[Any]) -> int:
    n = 0
    for x, y in zip(a, b, strict=False):
        if x != y:
            break
        n += 1
    return n


def _trace(run: Run) -> dict[str, Any]:
    """The trace as recorded: the agent's model turns without their request bodies,
    which `model_turns.jsonl` keeps as deltas (whole, they would grow with the square
    of the turns). A judge's turns (not in `model_turns.jsonl`) keep theirs."""
    return _trace_dict(run.trace, drop_requests=True)


_NOT_KEPT = ("request", "user")  # a `user_turns.jsonl` line: the trace step's data but these


def _on_trace_only(data: dict[str, Any]) -> bool:
    """A judge's or a user model's turn: recorded on the trace alone, request and all."""
    return bool(data.get("judge") or data.get("user"))


def _trace_dict(trace: Trace, *, drop_requests: bool = False) -> dict[str, Any]:
    """`Trace.to_dict()` without its copy: the steps' values are handed to the encoder
    as they are (orjson writes a dataclass among them by its fields, as `asdict` did),
    since the record is encoded once, at once. With `drop_requests`, see `_trace`."""
    steps = []
    for s in trace.steps:
        data = s.data
        if drop_requests and s.kind == "model_turn" and data and not _on_trace_only(data):
            data = {k: v for k, v in data.items() if k != "request"}
        steps.append(
            {"kind": s.kind, "content": s.content, "data": data, "start": s.start, "end": s.end}
        )
    return {"id": trace.id, "content": trace.content, "steps": steps}


def _sum(items: Iterable[tuple[dict[str, Any], Any]]) -> tuple[dict[str, int], float]:
    total: dict[str, int] = {}
    cost = 0.0
    for usage, spent in items:
        for k, v in usage.items():
            if isinstance(v, int):
                total[k] = total.get(k, 0) + v
        cost += spent or 0.0
    return total, cost


def _error(error: Any) -> dict[str, Any]:
    found = {"phase": error.phase, "type": error.type, "message": error.message}
    traceback = getattr(error, "traceback", None)
    if traceback:
        found["traceback"] = traceback
    return found


def _harness_output(run: Run) -> str:
    """What a harness (`CommandAgent`) wrote on stderr, as its trace kept it."""
    return "".join(
        str(step.data["stderr"])
        for step in run.trace.steps
        if step.kind == "assistant" and step.data and step.data.get("stderr")
    )


def _outcome(run: Run) -> dict[str, Any]:
    grade = run.grade
    error = run.error
    evaluation = None
    if grade is not None:
        evaluation = "failed" if run.evaluation_failed else "ok"
    elif error is not None and error.phase in ("grading", "verifying"):
        evaluation = "failed"
    return {
        **_verified(run),
        "phase": "done" if run.status == "completed" else run.phase,
        "reward": run.reward,
        "error": _failed_evaluation(run) if error is None else _error(error),
        "stop_reason": run.stop_reason,
        "launch_attempts": run.launch_attempts,
        "launch_errors": [_error(e) for e in run.launch_errors],
        "answer": run.answer,
        "result": {
            "grade": None if grade is None else grade.to_dict(),
            "evaluation": evaluation,
        },
    }


def _verified(run: Run) -> dict[str, Any]:
    """A verifier's part of the record: the actor's own grade and the verifier's
    trace, beside the grade of record (nothing for a task without a verifier)."""
    if run.actor_grade is None and run.verifier_trace is None:
        return {}
    return {
        "actor_grade": None if run.actor_grade is None else run.actor_grade.to_dict(),
        "verifier_trace": None if run.verifier_trace is None else _trace_dict(run.verifier_trace),
    }


def _failed_evaluation(run: Run) -> dict[str, Any] | None:
    """A graded run whose evaluation failed (a reward or metric raised) is recorded with
    a grading error beside its reward, so every reader counts it apart from a 0."""
    if not run.evaluation_failed or run.grade is None:
        return None
    errors = run.grade.info.get("errors") or {}
    message = "; ".join(f"{name}: {why}" for name, why in errors.items())
    return {"phase": "grading", "type": "EvaluationFailed", "message": message}
