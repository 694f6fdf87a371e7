"""`proctor show RECORD [ROLLOUT]`: list a recorded run's rollouts, or print one's transcript."""

from __future__ import annotations

import argparse
import os
from pathlib import Path
from typing import Any

from ._common import CLIError, print_json, table

__all__ = ["cmd_show"]

_RULE = "--"


def cmd_show(args: argparse.Namespace) -> int:
    """List the rollouts of RECORD, or show one (`ROLLOUT`, or a `rollouts/<id>.json`)."""
    out, rollout = _locate(args.record, args.rollout)
    if rollout is None:
        return _list(out, args.json)
    return _one(out, rollout, args.json)


def _locate(record: str, rollout: str | None) -> tuple[str, str | None]:
    """The output directory and the rollout named, if any.

    Raises:
        CLIError: RECORD is neither an output directory nor a rollout's record file.
    """
    path = Path(record)
    named = path.suffix == ".json" and path.parent.name == "rollouts"
    if named and (path.is_file() or (path.parent.parent / "batch.json").is_file()):
        # (a record file in layout 1; in layout 2 the name stands for its segment line)
        if rollout is not None:
            raise CLIError(f"{record} names a rollout already; drop {rollout!r}")
        return str(path.parent.parent), path.stem
    if not (path / "batch.json").is_file():
        raise CLIError(f"{record}: not a recorded run (no batch.json); see 'proctor run'")
    return str(path), rollout


def _list(out: str, as_json: bool) -> int:
    from ..store import list_rollouts, read_batch

    batch = read_batch(out)
    rows = list_rollouts(out, limit=None)
    if as_json:
        print_json({"batch": batch.get("batch_id"), "name": batch.get("name"), "rollouts": rows})
        return 0
    cells = [
        (r["id"], r["status"], _reward(r["reward"]), r["error_phase"] or "", r["error_type"] or "")
        for r in rows
    ]
    print(f"{batch.get('name') or ''} {batch.get('batch_id') or ''}  {len(rows)} rollouts")
    print(table(("id", "status", "reward", "error phase", "error"), cells, right={2}))
    return 0


def _reward(value: float | None) -> str:
    return "-" if value is None else f"{value:.3f}"


def _resolve(out: str, rollout: str) -> str:
    """The rollout's id: exact, or the only one starting with `rollout`.

    Raises:
        CLIError: no rollout, or several, match.
    """
    from ..store import list_rollouts

    ids = [r["id"] for r in list_rollouts(out, limit=None) if r["id"].startswith(rollout)]
    if rollout in ids or os.path.exists(os.path.join(out, "rollouts", f"{rollout}.json")):
        return rollout
    if len(ids) == 1:
        return str(ids[0])
    if not ids:
        raise CLIError(f"{out}: no rollout {rollout!r} (see 'proctor show {out}')")
    raise CLIError(f"{out}: {rollout!r} matches {len(ids)} rollouts: {', '.join(ids[:5])}")


def _one(out: str, rollout: str, as_json: bool) -> int:
    from ..store import read_rollout

    try:
        data = read_rollout(out, _resolve(out, rollout))
    except ValueError as exc:
        raise CLIError(str(exc)) from None
    record = data["record"] or {}
    steps = _steps(record, data)
    if as_json:
        print_json({**data, "steps": steps})
        return 0
    print(render_rollout(record, steps, data["model_turns"]))
    return 0


def _steps(record: dict[str, Any], data: dict[str, Any]) -> list[dict[str, Any]]:
    """The trace's steps: streamed to trace.jsonl, or inline in the record."""
    if data["trace"]:
        return list(data["trace"])
    trace = record.get("trace") or {}
    return list(trace.get("steps") or ())


def render_rollout(
    record: dict[str, Any], steps: list[dict[str, Any]], turns: list[dict[str, Any]]
) -> str:
    """One rollout as a reader wants it: header, prompt, turns and tools, answer,
    grade, error with its traceback."""
    lines = _header(record, turns)
    lines += _section("prompt", _text(record.get("prompt")))
    for step in steps:
        lines += _step(step)
    lines += _section("answer", _text(record.get("answer")))
    grade = (record.get("result") or {}).get("grade")
    if grade is not None:
        lines += _section("grade", _grade(grade))
    error = record.get("error")
    if error:
        body = f"[{error.get('phase')}] {error.get('type')}: {error.get('message')}"
        if error.get("traceback"):
            body += "\n" + str(error["traceback"]).rstrip()
        lines += _section("error", body)
    return "\n".join(lines)


def _header(record: dict[str, Any], turns: list[dict[str, Any]]) -> list[str]:
    lines = [
        f"rollout {record.get('id')}  task {record.get('task')}  agent {record.get('agent')}"
        f"  attempt {record.get('attempt')}",
        f"status {record.get('status')} (phase {record.get('phase')})  reward "
        f"{_reward(record.get('reward'))}{_duration(record)}",
    ]
    usage = record.get("usage") or {}
    extra = []
    if record.get("stop_reason"):
        extra.append(f"stopped by {record['stop_reason']}")
    if usage:
        extra.append(
            f"tokens in {usage.get('input_tokens', 0)} out {usage.get('output_tokens', 0)}"
        )
    if record.get("cost") is not None:
        extra.append(f"cost ${record['cost']:.4f}")
    if turns:
        extra.append(f"{len(turns)} model turns recorded")
    if extra:
        lines.append("  ".join(extra))
    return lines


def _duration(record: dict[str, Any]) -> str:
    start, end = record.get("started_at"), record.get("ended_at")
    if isinstance(start, int | float) and isinstance(end, int | float):
        return f"  {end - start:.2f}s"
    return ""


def _section(title: str, body: str) -> list[str]:
    return ["", f"{_RULE} {title}", body]


def _step(step: dict[str, Any]) -> list[str]:
    """A trace step worth reading (the prompt, answer and grade have their own sections)."""
    kind, content, data = step.get("kind"), step.get("content"), step.get("data") or {}
    if kind == "model_turn" and data.get("user"):
        return []  # a simulated user's model: its replies are the dialogue's `user` steps
    if kind == "model_turn":
        return _section(
            f"model turn {data.get('step') or data.get('turn') or ''}".rstrip(),
            _turn(content, data),
        )
    if kind == "tool_call":
        call = content if isinstance(content, dict) else {}
        return _section(f"tool call {call.get('name')}", _text(call.get("arguments")))
    if kind == "tool_result":
        flag = " (error)" if data.get("is_error") else ""
        return _section(f"tool result {data.get('name') or ''}{flag}".rstrip(), _text(content))
    if data.get("dialogue") and kind in ("assistant", "user"):  # a simulated user's dialogue
        said = "said to the user" if kind == "assistant" else "the user replied"
        return _section(said, _text(content))
    if kind == "assistant" and content is not None:
        return _section("assistant", _text(content))
    return []


def _turn(message: Any, data: dict[str, Any]) -> str:
    if data.get("error"):
        return f"error: {data['error']}"
    if not isinstance(message, dict):
        return _text(message)
    parts = [_text(message.get("content"))] if message.get("content") else []
    for call in message.get("tool_calls") or ():
        fn = call.get("function") or call
        parts.append(f"-> {fn.get('name')}({_text(fn.get('arguments'))})")
    return "\n".join(parts) or "(no content)"


def _grade(grade: dict[str, Any]) -> str:
    lines = [f"reward {_reward(grade.get('reward'))}"]
    for sub in grade.get("subscores") or ():
        lines.append(f"  {sub.get('name')}: {sub.get('value')} (weight {sub.get('weight', 1)})")
    if grade.get("info"):
        lines.append(f"info: {_text(grade['info'])}")
    if grade.get("content"):
        lines.append(str(grade["content"]))
    return "\n".join(lines)


def _text(value: Any) -> str:
    """Text as it is; content parts joined; anything else as indented JSON."""
    from ..view import as_text

    return "(none)" if value is None else as_text(value)
