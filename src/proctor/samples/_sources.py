"""Where samples come from: a `Job` in memory, or a batch output directory on disk."""

from __future__ import annotations

import itertools
import os
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from ..store import JsonlReader, list_rollouts, read_record
from ._branch import EXTRAS, ModelTurn
from ._frames import inline_frames
from ._sample import Rollout, Sample, samples_of

if TYPE_CHECKING:
    from ..agents import Run
    from ..engine import Job

__all__ = ["BatchReading", "samples_from_batch", "samples_from_job"]

PAGE = 500  # index rows read at a time


@dataclass(slots=True)
class BatchReading:
    """What `samples_from_batch` read: the rollouts, and why those that gave no sample
    gave none (each counted under its first reason)."""

    rollouts: int = 0
    sampled: int = 0  # gave one sample or more
    not_completed: int = 0  # failed, interrupted, or not ended
    ungraded: int = 0  # completed without a reward
    evaluation_failed: int = 0  # a reward or metric raised
    no_model_turns: int = 0  # none answered and recorded with its request

    def reasons(self) -> list[str]:
        """Why rollouts gave no sample, one phrase per reason that applies."""
        phrases = (
            (self.not_completed, "did not complete"),
            (self.ungraded, "completed without a reward"),
            (self.evaluation_failed, "had their evaluation fail"),
            (
                self.no_model_turns,
                "had no model turns (only answered turns through the interception proxy "
                "are recorded; an agent that calls no model makes none)",
            ),
        )
        return [f"{n} {text}" for n, text in phrases if n]


def samples_from_job(job: Job) -> Iterator[Sample]:
    """The samples of every graded run of `job`, one per branch of its trace (a run
    whose evaluation failed, a reward or metric raising, gives none).

    A run's model turns are the `model_turn` steps of its trace that carry their
    request (an interception proxy records them so), else its proxy session's turns
    (a `ToolAgent` behind a proxy). `advantage` is the run's own when set (group
    rewards), else its reward minus the mean reward of its group's graded runs, for
    groups of two or more runs.

    Raises:
        ValueError: the job did not keep its runs (`Taskset.run(keep=...)`).
    """
    if len(job.runs) != job.stats.runs:
        raise ValueError(
            f"job {job.name or job.id[:8]} kept {len(job.runs)} of its {job.stats.runs} runs: "
            "samples need them (Taskset.run(keep='runs'), or a sink that records them)"
        )
    groups: dict[str, list[Any]] = {}
    for run in job.runs:
        groups.setdefault(run.group_id, []).append(_run_reward(run))
    for run in job.runs:
        reward = _run_reward(run)
        if reward is not None:
            rollout = _run_rollout(run, reward, groups[run.group_id])
            yield from samples_of(rollout, _run_turns(run))


def _run_reward(run: Run) -> float | None:
    """The reward a sample may carry: None when the run failed or its evaluation did."""
    if run.grade is not None and run.grade.is_error:
        return None
    return run.reward


def _run_rollout(run: Run, reward: float, rewards: list[Any]) -> Rollout:
    return Rollout(
        id=run.trace_id,
        task=run.slug,
        model=None,
        group_id=run.group_id,
        reward=reward,
        advantage=_advantage(getattr(run, "advantage", None), reward, rewards),
    )


def samples_from_batch(
    path: str | os.PathLike[str],
    *,
    page: int = PAGE,
    reading: BatchReading | None = None,
    inline: bool = False,
) -> Iterator[Sample]:
    """The samples of every graded rollout of a batch output directory (`proctor
    batch`, or a `proctor run` record), read `page` index rows at a time (a rollout
    whose evaluation failed gives none).

    Model turns come from `model_turns.jsonl` (the request's conversation rebuilt from
    each line's `context`), else from the trace's `model_turn` steps that carry their
    request. The group is the rollouts of one task and agent (the record's `group_id`
    when it has one); `advantage` as in `samples_from_job`. `reading`, when given,
    counts the rollouts read and why those without samples gave none.

    Images a harness sent through the proxy are references to the rollout's frame
    files (`{"type": "image", ..., "path": "frames/<sha256>.<ext>"}`, relative to
    `rollouts/<id>/artifacts/`); `inline` replaces each with the file's bytes, as
    base64 (`"data"`), checked against its digest.

    Raises:
        StoreError: `path` is not a batch output directory.
        ValueError: with `inline`, a referenced frame is missing or not its digest.
    """
    root = os.fspath(path)
    read = reading if reading is not None else BatchReading()
    rows = _rows(root, page)
    for _, members in itertools.groupby(rows, key=lambda r: (r["task"], r["agent"])):
        group = [(row, _record(root, row)) for row in members]
        rewards = [_graded(row, record) for row, record in group]
        for (row, record), reward in zip(group, rewards, strict=True):
            read.rollouts += 1
            if row["status"] != "completed":
                read.not_completed += 1
            elif row["reward"] is None:
                read.ungraded += 1
            elif reward is None:
                read.evaluation_failed += 1
            else:
                samples = _rollout_samples(root, row, record, reward, rewards, read)
                if inline:
                    artifacts = os.path.join(root, "rollouts", row["id"], "artifacts")
                    samples = [inline_frames(s, artifacts) for s in samples]
                yield from samples


def _rows(root: str, page: int) -> Iterator[dict[str, Any]]:
    """Every index row in plan order (a group's rows are adjacent), page by page."""
    for offset in itertools.count(0, page):
        rows = list_rollouts(root, limit=page, offset=offset)
        yield from rows
        if len(rows) < page:
            return


def _record(root: str, row: dict[str, Any]) -> dict[str, Any]:
    """A completed rollout's record ({} for the others: they give no samples)."""
    if row["status"] != "completed" or row["reward"] is None:
        return {}
    return read_record(root, row["id"])


def _graded(row: dict[str, Any], record: dict[str, Any]) -> float | None:
    """The reward a sample may carry: a completed rollout's, unless its evaluation failed
    (a reward or metric raised: its score is no reward to learn from)."""
    grade = (record.get("result") or {}).get("grade") or {}
    if not record or grade.get("is_error"):
        return None
    return float(row["reward"])


def _rollout_samples(
    root: str,
    row: dict[str, Any],
    record: dict[str, Any],
    reward: float,
    rewards: list[Any],
    read: BatchReading,
) -> list[Sample]:
    folder = os.path.join(root, "rollouts", row["id"])
    rollout = Rollout(
        id=row["id"],
        task=row["task"],
        model=row["model"] or record.get("model"),
        group_id=record.get("group_id") or f"{row['task']}--{row['agent']}",
        reward=reward,
        advantage=_advantage(record.get("advantage"), reward, rewards),
    )
    turns = list(rebuild_turns(JsonlReader(os.path.join(folder, "model_turns.jsonl"))))
    if not turns:
        turns = _trace_turns(record, folder)
    samples = samples_of(rollout, turns)
    if samples:
        read.sampled += 1
    else:
        read.no_model_turns += 1
    return samples


def rebuild_turns(lines: Iterable[Mapping[str, Any]]) -> Iterator[ModelTurn]:
    """The model turns of `model_turns.jsonl` lines, each request's conversation rebuilt
    from the `context` deltas (a retried turn's later line wins). A turn whose previous
    turn cannot be rebuilt, and lines without `context`, are left out."""
    latest: dict[int, Mapping[str, Any]] = {}
    for line in lines:
        if isinstance(line.get("turn"), int):
            latest[line["turn"]] = line
    previous: tuple[int, list[Any]] | None = None
    extras: dict[str, Any] = {}
    for number in sorted(latest):
        line = latest[number]
        messages = _messages(line.get("context"), number, previous)
        previous = None if messages is None else (number, messages)
        if messages is None:
            continue
        extras.update({k: line["context"][k] for k in EXTRAS if k in line["context"]})
        request = {"messages": messages, **{k: v for k, v in extras.items() if v is not None}}
        data = {**line, "request": request}
        turn = ModelTurn.from_step({"kind": "model_turn", "data": data}, number)
        if turn is not None:
            yield turn


def _messages(
    context: Any, number: int, previous: tuple[int, list[Any]] | None
) -> list[Any] | None:
    """Turn `number`'s conversation from its `context` and the previous turn's, if known."""
    kept = context.get("kept") if isinstance(context, Mapping) else None
    if not isinstance(kept, int) or kept < 0:
        return None
    if kept == 0:
        return list(context.get("new") or ())
    if previous is None or previous[0] != number - 1 or len(previous[1]) < kept:
        return None
    return previous[1][:kept] + list(context.get("new") or ())


def _trace_turns(record: Mapping[str, Any], folder: str) -> list[ModelTurn]:
    trace = record.get("trace")
    steps: Iterable[Any] = ()
    if isinstance(trace, Mapping) and isinstance(trace.get("steps"), list):
        steps = trace["steps"]
    elif os.path.isdir(folder):
        steps = JsonlReader(os.path.join(folder, "trace.jsonl"))
    turns = (ModelTurn.from_step(s, i + 1) for i, s in enumerate(steps))
    return [t for t in turns if t is not None]


def _run_turns(run: Run) -> list[ModelTurn]:
    turns = [ModelTurn.from_step(s, i + 1) for i, s in enumerate(run.trace.steps)]
    found = [t for t in turns if t is not None]
    session = run.proxy_session
    if found or session is None:
        return found
    steps = ({"kind": "model_turn", "content": t.get("message"), "data": t} for t in session.turns)
    return [t for i, s in enumerate(steps) if (t := ModelTurn.from_step(s, i + 1)) is not None]


def _advantage(given: Any, reward: float, group: list[Any]) -> float | None:
    """The run's own advantage, else its reward minus its group's mean (groups of 2+)."""
    if isinstance(given, int | float):
        return float(given)
    graded = [r for r in group if r is not None]
    if len(group) < 2 or not graded:
        return None
    return float(reward - sum(graded) / len(graded))
