"""One rollout's files shaped for its page: turns, tool calls and results, grade, error.

Every value stays data: the template escapes it. Non-text values become indented JSON.
"""

from __future__ import annotations

import json
from typing import Any

__all__ = ["as_text", "shape_rollout"]


def as_text(value: Any) -> str:
    """Text as it is; content parts joined; anything else as indented JSON."""
    if value is None:
        return ""
    if isinstance(value, str):
        return value
    if isinstance(value, list) and all(isinstance(p, dict) and "text" in p for p in value):
        return "\n".join(str(p["text"]) for p in value)
    return json.dumps(value, indent=2, ensure_ascii=False, default=str)


def shape_rollout(detail: dict[str, Any]) -> dict[str, Any]:
    """The page's sections from `read_rollout`'s result."""
    record = detail.get("record") or {}
    index = detail.get("index") or {}
    steps = _steps(record, detail)
    grade = _dict(record.get("result")).get("grade")
    return {
        "meta": {**index, **{k: record.get(k, index.get(k)) for k in _META}},
        "usage": _dict(record.get("usage")),
        "prompt": as_text(record.get("prompt")),
        "turns": _turns(detail.get("model_turns") or [], steps),
        "steps": [_step(s) for s in steps if s.get("kind") in ("assistant", "tool_call")],
        "tool_results": [_tool_result(s) for s in steps if s.get("kind") == "tool_result"],
        "answer": as_text(record.get("answer")),
        "grade": _grade(grade) if isinstance(grade, dict) else None,
        "error": _error(record.get("error")),
        "torn": detail.get("torn") or {},
        "attempts": detail.get("attempts") or [],
        "artifacts": detail.get("artifacts") or {},
    }


_META = (
    "status",
    "attempt",
    "phase",
    "reward",
    "cost",
    "started_at",
    "ended_at",
    "stop_reason",
    "task",
    "agent",
    "model",
)


def _dict(value: Any) -> dict[str, Any]:
    return value if isinstance(value, dict) else {}


def _steps(record: dict[str, Any], detail: dict[str, Any]) -> list[dict[str, Any]]:
    if detail.get("trace"):
        return [s for s in detail["trace"] if isinstance(s, dict)]
    trace = record.get("trace") or {}
    steps = trace.get("steps") if isinstance(trace, dict) else None
    return [s for s in steps or () if isinstance(s, dict)]


def _turns(lines: list[Any], steps: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Model turns: `model_turns.jsonl` (a retried turn's later line wins), or the
    trace's `model_turn` steps."""
    if lines:
        by_turn: dict[Any, dict[str, Any]] = {}
        for i, line in enumerate(x for x in lines if isinstance(x, dict)):
            by_turn[line.get("turn", f"#{i}")] = line
        return [_turn(t, _message(t)) for t in by_turn.values()]
    return [
        _turn(s.get("data") or {}, s.get("content")) for s in steps if s.get("kind") == "model_turn"
    ]


def _message(turn: dict[str, Any]) -> Any:
    """The turn's reply: the proxy's `message`, else the response's first choice (chat)
    or its content blocks (messages); None when there is neither."""
    if turn.get("message") is not None:
        return turn["message"]
    response = turn.get("response")
    if not isinstance(response, dict):
        return None
    choices = response.get("choices")
    if isinstance(choices, list) and choices and isinstance(choices[0], dict):
        return choices[0].get("message")
    return response.get("content") or response.get("output")


def _turn(data: dict[str, Any], message: Any) -> dict[str, Any]:
    msg = message if isinstance(message, dict) else {"content": message}
    attempts = [a for a in data.get("attempts") or () if isinstance(a, dict)]
    return {
        "turn": data.get("turn") or data.get("step"),
        "model": data.get("model"),
        "digest": data.get("request_sha256"),
        "messages": data.get("messages"),
        "status": data.get("status"),
        "error": as_text(data.get("error")),
        "text": as_text(msg.get("content")),
        "tool_calls": [_call(c) for c in msg.get("tool_calls") or () if isinstance(c, dict)],
        "usage": _dict(data.get("usage")),
        "cost": data.get("cost"),
        "attempts": [
            {"n": a.get("n"), "status": a.get("status"), "error": as_text(a.get("error"))}
            for a in attempts
        ],
    }


def _call(call: dict[str, Any]) -> dict[str, str]:
    inner = call.get("function")
    fn: dict[str, Any] = inner if isinstance(inner, dict) else call
    return {"name": as_text(fn.get("name")), "arguments": as_text(fn.get("arguments"))}


def _step(step: dict[str, Any]) -> dict[str, str]:
    content = step.get("content")
    if step.get("kind") == "tool_call" and isinstance(content, dict):
        return {"kind": "tool_call", **_call(content)}
    return {"kind": str(step.get("kind")), "text": as_text(content)}


def _tool_result(step: dict[str, Any]) -> dict[str, Any]:
    raw = step.get("data")
    data: dict[str, Any] = raw if isinstance(raw, dict) else {}
    return {
        "name": as_text(data.get("name")),
        "is_error": bool(data.get("is_error")),
        "text": as_text(step.get("content")),
    }


def _grade(grade: dict[str, Any]) -> dict[str, Any]:
    subs = [s for s in grade.get("subscores") or () if isinstance(s, dict)]
    return {
        "reward": grade.get("reward"),
        "subscores": [
            {"name": as_text(s.get("name")), "value": s.get("value"), "weight": s.get("weight", 1)}
            for s in subs
        ],
        "info": as_text(grade.get("info")) if grade.get("info") else "",
        "content": as_text(grade.get("content")),
    }


def _error(error: Any) -> dict[str, str] | None:
    if not isinstance(error, dict):
        return None
    return {k: as_text(error.get(k)) for k in ("phase", "type", "message", "traceback")}
