"""The screen actions a model turn chose, read from its recorded response, as marks to
draw on the frame the turn saw.

Three kinds of call are read, in each provider's wire format (Chat Completions
`tool_calls`, Anthropic `tool_use` blocks, Responses `output` items): proctor's
normalized `computer_action` (`{"actions": [...]}` of computer/1 actions), Anthropic's
native `computer` tool (`{"action": "left_click", "coordinate": [x, y]}`), and OpenAI's
native `computer_call` (`action` or `actions`). Everything is recorded data: a value of
the wrong type makes a note (or nothing), never an error.
"""

from __future__ import annotations

import json
import math
from typing import Any

__all__ = ["MARKS_LIMIT", "Mark", "marks"]

MARKS_LIMIT = 200
"""Marks kept at most per turn (a batch may hold 10,000 actions)."""

Mark = dict[str, Any]
"""`{"kind": "click" | "move" | "drag" | "scroll" | "note", "points": [(x, y), ...],
"label": str}`: points in the screen's pixels; a note has none."""

_ANTHROPIC_CLICKS = {
    "left_click": ("click", 1),
    "right_click": ("right click", 1),
    "middle_click": ("middle click", 1),
    "double_click": ("double click", 2),
    "triple_click": ("triple click", 3),
}


def marks(response: Any) -> list[Mark]:
    """The marks of every screen action in `response` (a recorded turn's), in order."""
    out: list[Mark] = []
    for name, args in _calls(response):
        if name == "computer_action":
            actions = _dict(args).get("actions")
            for action in actions if isinstance(actions, list) else ():
                out.append(_computer1(_dict(action)))
        elif name == "computer":
            out.append(_anthropic(_dict(args)))
        elif name == "computer_call":
            args = _dict(args)
            many = args.get("actions")
            for action in many if isinstance(many, list) else [args.get("action")]:
                out.append(_openai(_dict(action)))
        if len(out) >= MARKS_LIMIT:
            break
    return out[:MARKS_LIMIT]


def _calls(response: Any) -> list[tuple[str, Any]]:
    """(name, arguments) of each call in a chat, messages or responses body."""
    body = _dict(response)
    found: list[tuple[str, Any]] = []
    choices = body.get("choices")
    if isinstance(choices, list) and choices:
        message = _dict(_dict(choices[0]).get("message"))
        for call in _list(message.get("tool_calls")):
            fn = _dict(_dict(call).get("function"))
            found.append((_str(fn.get("name")), _json(fn.get("arguments"))))
    for block in _list(body.get("content")):
        block = _dict(block)
        if block.get("type") == "tool_use":
            found.append((_str(block.get("name")), block.get("input")))
    for item in _list(body.get("output")):
        item = _dict(item)
        if item.get("type") == "function_call":
            found.append((_str(item.get("name")), _json(item.get("arguments"))))
        elif item.get("type") == "computer_call":
            found.append(("computer_call", item))
    return found


def _computer1(action: dict[str, Any]) -> Mark:
    """A computer/1 action (the normalized tool's)."""
    kind = _str(action.get("type"))
    point = _point(action.get("x"), action.get("y"))
    if kind == "click" and point:
        button, count = _str(action.get("button") or "left"), action.get("count")
        word = {2: "double click", 3: "triple click"}.get(count if isinstance(count, int) else 1)
        label = word or ("click" if button == "left" else f"{button} click")
        return _mark("click", [point], label)
    if kind == "move" and point:
        return _mark("move", [point], "move")
    if kind == "drag":
        path = [p for p in map(_pair, _list(action.get("path"))) if p]
        return _mark("drag", path, "drag") if len(path) >= 2 else _note(action)
    if kind == "scroll" and point:
        return _mark("scroll", [point], _scroll(action.get("dx"), action.get("dy")))
    return _note(action)


def _anthropic(args: dict[str, Any]) -> Mark:
    """An action of Anthropic's native computer tool."""
    kind = _str(args.get("action"))
    point = _pair(args.get("coordinate"))
    if kind in _ANTHROPIC_CLICKS and point:
        return _mark("click", [point], _ANTHROPIC_CLICKS[kind][0])
    if kind == "mouse_move" and point:
        return _mark("move", [point], "move")
    start = _pair(args.get("start_coordinate"))
    if kind == "left_click_drag" and start and point:
        return _mark("drag", [start, point], "drag")
    if kind == "scroll" and point:
        amount, direction = args.get("scroll_amount"), _str(args.get("scroll_direction"))
        return _mark("scroll", [point], f"scroll {direction} {_short(amount)}".strip())
    if kind in ("type", "key"):
        return _text_note(kind, args.get("text"))
    return _mark("note", [], kind or "?")


def _openai(action: dict[str, Any]) -> Mark:
    """An action of OpenAI's `computer_call`."""
    kind = _str(action.get("type"))
    point = _point(action.get("x"), action.get("y"))
    if kind == "click" and point:
        button = _str(action.get("button") or "left")
        return _mark("click", [point], "click" if button == "left" else f"{button} click")
    if kind == "double_click" and point:
        return _mark("click", [point], "double click")
    if kind == "move" and point:
        return _mark("move", [point], "move")
    if kind == "drag":
        path = [_point(_dict(p).get("x"), _dict(p).get("y")) for p in _list(action.get("path"))]
        points = [p for p in path if p]
        return _mark("drag", points, "drag") if len(points) >= 2 else _mark("note", [], "drag")
    if kind == "scroll" and point:
        return _mark("scroll", [point], _scroll(action.get("scroll_x"), action.get("scroll_y")))
    if kind == "keypress":
        keys = [_str(k) for k in _list(action.get("keys"))]
        return _mark("note", [], "keypress " + "+".join(keys))
    if kind == "type":
        return _text_note("type", action.get("text"))
    return _mark("note", [], kind or "?")


def _note(action: dict[str, Any]) -> Mark:
    """A computer/1 action without a point: type, key, hotkey, wait, done (or a bad one)."""
    kind = _str(action.get("type")) or "?"
    if kind in ("type", "key"):
        return _text_note(kind, action.get(kind if kind == "key" else "text"))
    if kind == "hotkey":
        return _mark("note", [], "hotkey " + "+".join(_str(k) for k in _list(action.get("keys"))))
    if kind == "wait":
        return _mark("note", [], f"wait {_short(action.get('ms'))} ms")
    return _mark("note", [], kind)


def _text_note(kind: str, text: Any) -> Mark:
    value = _str(text)
    shown = value if len(value) <= 60 else value[:59] + "…"
    return _mark("note", [], f"{kind} {json.dumps(shown, ensure_ascii=False)}")


def _scroll(dx: Any, dy: Any) -> str:
    steps = [f"{axis} {_short(v)}" for axis, v in (("dx", dx), ("dy", dy)) if _short(v)]
    return " ".join(["scroll", *steps])


def _mark(kind: str, points: list[tuple[float, float]], label: str) -> Mark:
    return {"kind": kind, "points": points[:1000], "label": label[:200]}


def _point(x: Any, y: Any) -> tuple[float, float] | None:
    ok = all(isinstance(v, int | float) and not isinstance(v, bool) for v in (x, y))
    if not ok or not (math.isfinite(x) and math.isfinite(y)):
        return None
    return float(x), float(y)


def _pair(value: Any) -> tuple[float, float] | None:
    if isinstance(value, list | tuple) and len(value) == 2:
        return _point(value[0], value[1])
    return None


def _short(value: Any) -> str:
    ok = isinstance(value, int | float) and not isinstance(value, bool)
    return f"{value:g}" if ok else ""


def _json(value: Any) -> Any:
    if not isinstance(value, str):
        return value
    try:
        return json.loads(value)
    except ValueError:
        return None


def _str(value: Any) -> str:
    return value if isinstance(value, str) else ""


def _dict(value: Any) -> dict[str, Any]:
    return value if isinstance(value, dict) else {}


def _list(value: Any) -> list[Any]:
    return value if isinstance(value, list) else []
