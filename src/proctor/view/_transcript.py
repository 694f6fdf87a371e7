"""One rollout's files shaped for its page: the transcript in trace order, grade, error.

Every value stays data: the template escapes it. Non-text values become indented JSON;
content parts become `{"text": ...}` or, for base64 PNG/JPEG/GIF/WebP images only,
`{"image": "data:..."}` (anything else, a `data:` URL of another type included, is text);
a frame the interception proxy kept becomes `{"image": "ID/artifacts/frames/<file>"}`.
"""

from __future__ import annotations

import json
import re
from typing import Any
from urllib.parse import quote

__all__ = ["as_text", "parts", "proxy_turns", "shape_rollout", "transcript_text"]

_IMAGE_TYPES = ("image/png", "image/jpeg", "image/gif", "image/webp")
_BASE64 = re.compile(r"[A-Za-z0-9+/]+={0,2}")
_DATA_URL = re.compile(r"data:(image/(?:png|jpeg|gif|webp));base64,([A-Za-z0-9+/]+={0,2})")
# A frame the interception proxy kept: a file in the rollout's artifacts, by digest.
_FRAME = re.compile(r"frames/[0-9a-f]{64}\.(?:png|jpg|gif|webp)")


def as_text(value: Any) -> str:
    """Text as it is; content parts joined; anything else as indented JSON."""
    if value is None:
        return ""
    if isinstance(value, str):
        return value
    if isinstance(value, list) and all(isinstance(p, dict) and "text" in p for p in value):
        return "\n".join(str(p["text"]) for p in value)
    return json.dumps(value, indent=2, ensure_ascii=False, default=str)


def parts(value: Any) -> list[dict[str, str]]:
    """Content as parts to show: text, or a checked image data URL."""
    if value is None or value == "":
        return []
    if not isinstance(value, list):
        return [{"text": as_text(value)}]
    out: list[dict[str, str]] = []
    for part in value:
        image = _image(part)
        if image is not None:
            out.append({"image": image})
        elif isinstance(part, dict) and part.get("type") in ("thinking", "redacted_thinking"):
            continue  # shown as the turn's reasoning
        elif isinstance(part, dict) and isinstance(part.get("text"), str):
            out.append({"text": part["text"]})
        else:
            out.append({"text": as_text(part)})
    return out


def _image(part: Any) -> str | None:
    """The data URL of an OpenAI `image_url` or Anthropic base64 `image` part, if valid;
    a frame reference's `frames/<sha256>.<ext>`."""
    if not isinstance(part, dict):
        return None
    path = part.get("path")
    if part.get("type") == "image" and isinstance(path, str) and _FRAME.fullmatch(path):
        return path  # `shape_rollout` makes it the frame's artifact URL
    if part.get("type") == "image_url":
        inner = part.get("image_url")
        url = inner.get("url") if isinstance(inner, dict) else inner
        return url if isinstance(url, str) and _DATA_URL.fullmatch(url) else None
    source = part.get("source")
    if part.get("type") != "image" or not isinstance(source, dict):
        return None
    media, data = source.get("media_type"), source.get("data")
    if source.get("type") != "base64" or media not in _IMAGE_TYPES or not isinstance(data, str):
        return None
    return f"data:{media};base64,{data}" if _BASE64.fullmatch(data) else None


def shape_rollout(detail: dict[str, Any]) -> dict[str, Any]:
    """The page's sections from `read_rollout`'s result (or an archived attempt's)."""
    record = detail.get("record") or {}
    index = detail.get("index") or {}
    grade = _dict(record.get("result")).get("grade")
    prompt = as_text(record.get("prompt"))
    answer = as_text(record.get("answer"))
    entries = _items(detail, record, prompt, answer)
    rid = index.get("id") or record.get("id")
    return {
        "meta": {**index, **{k: record.get(k, index.get(k)) for k in _META}},
        "usage": _dict(record.get("usage")),
        "prompt": _frame_urls(parts(record.get("prompt")), rid),
        "entries": _frame_urls(entries, rid),
        "dialogue": dialogue(_steps(record, detail)),
        "harness": _harness(entries),
        "answer": answer,
        "grade": _grade(grade) if isinstance(grade, dict) else None,
        "error": _error(record.get("error")),
        "torn": detail.get("torn") or {},
        "attempts": detail.get("attempts") or [],
        "artifacts": detail.get("artifacts") or {},
    }


def dialogue(steps: list[dict[str, Any]]) -> list[dict[str, str]]:
    """A simulated user's conversation with the agent (steps marked `dialogue`, see
    `proctor.agents.UserClient`), in order: `{"role": "agent" | "user", "text"}`."""
    return [
        {"role": "agent" if s.get("kind") == "assistant" else "user", "text": as_text(s["content"])}
        for s in steps
        if _dict(s.get("data")).get("dialogue") and s.get("kind") in ("assistant", "user")
    ]


def _frame_urls(value: Any, rid: Any) -> Any:
    """`value` with each frame part's `frames/...` made the URL the rollout page (at
    `/b/NAME/r/ID`) serves it at: `ID/artifacts/frames/...`, or text without an id."""
    if isinstance(value, list):
        for item in value:
            _frame_urls(item, rid)
    elif isinstance(value, dict):
        image = value.get("image")
        if isinstance(image, str) and _FRAME.fullmatch(image):
            if isinstance(rid, str):
                value["image"] = f"{quote(rid, safe='')}/artifacts/{image}"
            else:
                value.pop("image")
                value["text"] = f"[{image}]"
        else:
            for item in value.values():
                _frame_urls(item, rid)
    return value


def transcript_text(shaped: dict[str, Any]) -> str:
    """The transcript as plain text, a section per item (for diffs)."""
    lines = ["## prompt", *_part_lines(shaped["prompt"])]
    for item in shaped["entries"]:
        lines.append(f"## {item['kind']}" + (f" {item['name']}" if item.get("name") else ""))
        if item.get("reasoning"):
            lines += ["[reasoning]", item["reasoning"]]
        lines += _part_lines(item.get("parts") or [])
        for call in item.get("tool_calls") or ():
            lines += [f"[tool call {call['name']}]", call["arguments"]]
    lines += ["## answer", shaped["answer"], "## grade"]
    grade = shaped["grade"]
    lines.append("not graded" if grade is None else f"reward {grade['reward']}")
    return "\n".join(lines)


def _part_lines(items: list[dict[str, str]]) -> list[str]:
    return [p.get("text", f"[image {len(p.get('image', ''))} chars]") for p in items]


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
    "group_rewards",
    "advantage",
)


def _dict(value: Any) -> dict[str, Any]:
    return value if isinstance(value, dict) else {}


def _steps(record: dict[str, Any], detail: dict[str, Any]) -> list[dict[str, Any]]:
    if detail.get("trace"):
        return [s for s in detail["trace"] if isinstance(s, dict)]
    trace = record.get("trace") or {}
    steps = trace.get("steps") if isinstance(trace, dict) else None
    return [s for s in steps or () if isinstance(s, dict)]


def proxy_turns(lines: list[Any]) -> list[dict[str, Any]]:
    """`model_turns.jsonl` by turn: a retried turn's later line wins."""
    by_turn: dict[Any, dict[str, Any]] = {}
    for i, line in enumerate(x for x in lines if isinstance(x, dict)):
        by_turn[line.get("turn", f"#{i}")] = line
    return list(by_turn.values())


def _items(
    detail: dict[str, Any], record: dict[str, Any], prompt: str, answer: str
) -> list[dict[str, Any]]:
    """Turns, tool calls, tool results and other steps in trace order.

    A trace's `model_turn` steps are matched in order with `model_turns.jsonl` lines
    (request digest, HTTP status); lines past the trace's turns come after them. Steps
    repeating the prompt, the answer or a turn's own tool call are left out, and so are
    a simulated user's model turns (`data["user"]`: its replies are the user's steps)."""
    proxy = proxy_turns(detail.get("model_turns") or [])
    items: list[dict[str, Any]] = []
    called: set[Any] = set()
    n = 0
    for step in _steps(record, detail):
        kind = step.get("kind")
        if kind == "model_turn" and _dict(step.get("data")).get("user"):
            continue  # not the agent's, nor in `model_turns.jsonl`
        if kind == "model_turn":
            line = proxy[n] if n < len(proxy) else {}
            n += 1
            items.append(_turn({**line, **_dict(step.get("data"))}, step.get("content"), step))
            called.update(c["id"] for c in items[-1]["tool_calls"])
        elif _shown(step, called, prompt, answer):
            items.append(_step(step))
    extra = [_turn(t, _message(t), {}) for t in proxy[n:]]
    return extra + items if n == 0 else items + extra


def _shown(step: dict[str, Any], called: set[Any], prompt: str, answer: str) -> bool:
    kind, text = step.get("kind"), as_text(step.get("content"))
    if kind == "tool_call":
        return _dict(step.get("data")).get("id") not in called or None in called
    return not ((kind == "user" and text == prompt) or (kind == "assistant" and text == answer))


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


def _harness(entries: list[dict[str, Any]]) -> bool:
    """Whether the turns are a harness's own conversation: model turns and no tool
    steps recorded beside them (what the harness sent is then shown open)."""
    kinds = {e["kind"] for e in entries}
    return "turn" in kinds and not kinds & {"tool_call", "tool_result"}


SENT_LIMIT = 200
"""Messages shown at most of what one turn sent (its `context.new`)."""


def _sent(context: Any) -> list[dict[str, Any]]:
    """What a turn sent the model that the previous turn had not: the system prompt or
    instructions when they changed, then its new messages (`model_turns.jsonl`'s
    `context`), each `{role, parts}`."""
    if not isinstance(context, dict):
        return []
    out = [
        {"role": key, "parts": parts(context[key])}
        for key in ("system", "instructions")
        if context.get(key) is not None
    ]
    new = context.get("new")
    for msg in (new if isinstance(new, list) else [])[:SENT_LIMIT]:
        msg = _dict(msg)
        content = msg.get("content")
        if content is None and msg.get("tool_calls") is not None:
            content = msg["tool_calls"]
        out.append(
            {"role": as_text(msg.get("role") or msg.get("type") or "?"), "parts": parts(content)}
        )
    return out


def _turn(data: dict[str, Any], message: Any, step: dict[str, Any]) -> dict[str, Any]:
    msg = message if isinstance(message, dict) else {"content": message}
    attempts = [a for a in data.get("attempts") or () if isinstance(a, dict)]
    content = msg.get("content")
    calls = [_call(c) for c in msg.get("tool_calls") or () if isinstance(c, dict)]
    if isinstance(content, list):
        calls += [_call(b) for b in content if isinstance(b, dict) and b.get("type") == "tool_use"]
        content = [b for b in content if not (isinstance(b, dict) and b.get("type") == "tool_use")]
    return {
        "kind": "turn",
        "turn": data.get("turn") or data.get("step"),
        "model": data.get("model"),
        "digest": data.get("request_sha256"),
        "messages": data.get("messages"),
        "sent": _sent(data.get("context")),
        "kept": _dict(data.get("context")).get("kept"),
        "status": data.get("status"),
        "error": as_text(data.get("error")),
        "reasoning": _reasoning(msg),
        "parts": parts(content),
        "tool_calls": calls,
        "usage": _dict(data.get("usage")),
        "cost": data.get("cost"),
        "latency": data.get("latency"),
        "attempts": [
            {"n": a.get("n"), "status": a.get("status"), "error": as_text(a.get("error"))}
            for a in attempts
        ],
        **_span(step),
    }


def _reasoning(msg: dict[str, Any]) -> str:
    """`reasoning_content`/`reasoning` (chat), or Anthropic `thinking` blocks."""
    for key in ("reasoning_content", "reasoning"):
        if msg.get(key):
            return as_text(msg[key])
    content = msg.get("content")
    blocks = content if isinstance(content, list) else ()
    return "\n".join(
        str(b.get("thinking")) for b in blocks if isinstance(b, dict) and b.get("thinking")
    )


def _span(step: dict[str, Any]) -> dict[str, Any]:
    start, end = step.get("start"), step.get("end")
    ok = isinstance(start, int | float) and isinstance(end, int | float)
    return {"start": start, "end": end} if ok else {"start": None, "end": None}


def _call(call: dict[str, Any]) -> dict[str, Any]:
    inner = call.get("function")
    fn: dict[str, Any] = inner if isinstance(inner, dict) else call
    args = fn.get("arguments", fn.get("input"))
    return {"id": call.get("id"), "name": as_text(fn.get("name")), "arguments": as_text(args)}


def _step(step: dict[str, Any]) -> dict[str, Any]:
    kind, content, data = str(step.get("kind")), step.get("content"), _dict(step.get("data"))
    if kind == "tool_call" and isinstance(content, dict):
        return {"kind": "tool_call", **_call(content), **_span(step)}
    if kind == "tool_result":
        return {
            "kind": "tool_result",
            "name": as_text(data.get("name")),
            "is_error": bool(data.get("is_error")),
            "parts": parts(content),
            **_span(step),
        }
    label = f"{kind} {data['phase']}" if kind == "task" and data.get("phase") else kind
    if data.get("dialogue"):
        label = "said to the user" if kind == "assistant" else "the user replied"
    return {"kind": "step", "name": label, "parts": parts(content), **_span(step)}


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
