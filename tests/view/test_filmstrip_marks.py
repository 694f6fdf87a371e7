"""The filmstrip's pieces without a browser: the actions read from each wire format's
recorded response, frame sizes from image headers, and hostile values drawn as data."""

from __future__ import annotations

import io
import json
from pathlib import Path
from typing import Any

import pytest
from PIL import Image

from proctor.view._filmstrip import filmstrip, image_size
from proctor.view._filmstrip_actions import MARKS_LIMIT, marks


def _chat(*actions: Any) -> dict[str, Any]:
    fn = {"name": "computer_action", "arguments": json.dumps({"actions": list(actions)})}
    return {"choices": [{"message": {"tool_calls": [{"function": fn}]}}]}


def _anthropic(**input_: Any) -> dict[str, Any]:
    return {"content": [{"type": "tool_use", "name": "computer", "input": input_}]}


def _openai(action: Any) -> dict[str, Any]:
    return {"output": [{"type": "computer_call", "action": action}]}


def _summary(response: Any) -> list[tuple[str, list[tuple[float, float]], str]]:
    return [(m["kind"], m["points"], m["label"]) for m in marks(response)]


def test_the_normalized_tools_actions_become_marks_in_order() -> None:
    response = _chat(
        {"type": "click", "x": 1, "y": 2, "button": "right", "count": 1},
        {"type": "click", "x": 3, "y": 4, "button": "left", "count": 2},
        {"type": "move", "x": 5, "y": 6},
        {"type": "drag", "path": [[0, 0], [9, 9]], "button": "left"},
        {"type": "scroll", "x": 7, "y": 8, "dx": 0, "dy": 3},
        {"type": "type", "text": "hi"},
        {"type": "key", "key": "ctrl+c"},
        {"type": "hotkey", "keys": ["ctrl", "t"]},
        {"type": "wait", "ms": 100},
        {"type": "done"},
    )
    assert _summary(response) == [
        ("click", [(1.0, 2.0)], "right click"),
        ("click", [(3.0, 4.0)], "double click"),
        ("move", [(5.0, 6.0)], "move"),
        ("drag", [(0.0, 0.0), (9.0, 9.0)], "drag"),
        ("scroll", [(7.0, 8.0)], "scroll dx 0 dy 3"),
        ("note", [], 'type "hi"'),
        ("note", [], 'key "ctrl+c"'),
        ("note", [], "hotkey ctrl+t"),
        ("note", [], "wait 100 ms"),
        ("note", [], "done"),
    ]
    # The same call as an Anthropic tool_use block or a Responses function_call.
    moves = {"actions": [{"type": "move", "x": 1, "y": 1}]}
    block = {"type": "tool_use", "name": "computer_action", "input": moves}
    assert _summary({"content": [block]}) == [("move", [(1.0, 1.0)], "move")]
    done = json.dumps({"actions": [{"type": "done"}]})
    item = {"type": "function_call", "name": "computer_action", "arguments": done}
    assert _summary({"output": [item]}) == [("note", [], "done")]


def test_native_computer_tools_become_marks() -> None:
    assert _summary(_anthropic(action="double_click", coordinate=[10, 20])) == [
        ("click", [(10.0, 20.0)], "double click")
    ]
    drag = _anthropic(action="left_click_drag", start_coordinate=[1, 2], coordinate=[3, 4])
    assert _summary(drag) == [("drag", [(1.0, 2.0), (3.0, 4.0)], "drag")]
    scroll = _anthropic(
        action="scroll", coordinate=[5, 5], scroll_direction="down", scroll_amount=3
    )
    assert _summary(scroll) == [("scroll", [(5.0, 5.0)], "scroll down 3")]
    assert _summary(_anthropic(action="screenshot")) == [("note", [], "screenshot")]
    assert _summary(_openai({"type": "click", "x": 1, "y": 2, "button": "wheel"})) == [
        ("click", [(1.0, 2.0)], "wheel click")
    ]
    path = {"type": "drag", "path": [{"x": 1, "y": 1}, {"x": 2, "y": 3}]}
    assert _summary(_openai(path)) == [("drag", [(1.0, 1.0), (2.0, 3.0)], "drag")]
    assert _summary(_openai({"type": "keypress", "keys": ["CTRL", "C"]})) == [
        ("note", [], "keypress CTRL+C")
    ]
    batched = {"output": [{"type": "computer_call", "actions": [{"type": "wait"}] * 2}]}
    assert _summary(batched) == [("note", [], "wait")] * 2


@pytest.mark.parametrize(
    "response",
    [
        None,
        "text",
        {"choices": "x"},
        {"choices": [{"message": {"tool_calls": [{"function": {"arguments": "{bad json"}}]}}]},
        _chat({"type": "click", "x": "1", "y": 2}, {"type": "click", "x": True, "y": 2}),
        _chat({"type": "click", "x": float("nan"), "y": 2}, 7, None, {"type": 3}),
        _chat({"type": "drag", "path": [[1, 2]]}, {"type": "drag", "path": "x"}),
        _anthropic(action="left_click", coordinate=[1]),
        _openai("x"),
        {"content": [{"type": "tool_use", "name": "computer_action", "input": {"actions": {}}}]},
    ],
)
def test_malformed_calls_make_notes_or_nothing_never_an_error(response: Any) -> None:
    for mark in marks(response):
        assert mark["kind"] == "note" and mark["points"] == []


def test_a_huge_batch_is_cut_to_the_limit() -> None:
    many = _chat(*[{"type": "move", "x": 1, "y": 1}] * (MARKS_LIMIT + 50))
    assert len(marks(many)) == MARKS_LIMIT


@pytest.mark.parametrize("fmt", ["PNG", "JPEG", "GIF", "WEBP"])
def test_frame_sizes_come_from_the_image_header(tmp_path: Path, fmt: str) -> None:
    out = io.BytesIO()
    Image.new("RGB", (321, 123), (1, 2, 3)).save(out, fmt)
    (tmp_path / "frame").write_bytes(out.getvalue())
    assert image_size(str(tmp_path), ("frame",)) == (321, 123)
    (tmp_path / "cut").write_bytes(out.getvalue()[:9])
    assert image_size(str(tmp_path), ("cut",)) is None
    assert image_size(str(tmp_path), ("missing",)) is None


def test_lossless_webp_sizes_too(tmp_path: Path) -> None:
    out = io.BytesIO()
    Image.new("RGB", (77, 55)).save(out, "WEBP", lossless=True)
    (tmp_path / "frame").write_bytes(out.getvalue())
    assert image_size(str(tmp_path), ("frame",)) == (77, 55)


def test_a_frame_that_is_a_link_is_not_read(tmp_path: Path) -> None:
    out = io.BytesIO()
    Image.new("RGB", (5, 5)).save(out, "PNG")
    (tmp_path / "real").write_bytes(out.getvalue())
    (tmp_path / "link").symlink_to(tmp_path / "real")
    assert image_size(str(tmp_path), ("link",)) is None


def test_recorded_text_and_numbers_are_drawn_as_data() -> None:
    hostile = '"><script>alert(1)</script>'
    cell = {
        "turn": 1,
        "frame": "frames/" + "a" * 64 + ".png",
        "url": "/b/x/r/y/artifacts/frames/" + "a" * 64 + ".png",
        "size": (100, 50),
        "marks": [
            {"kind": "click", "points": [(1e300, -1e300)], "label": hostile},
            {"kind": "note", "points": [], "label": hostile},
        ],
    }
    html = str(filmstrip([cell]))
    assert "<script>" not in html and "&lt;script&gt;" in html
    assert 'data-x="1e+06" data-y="-1e+06"' in html  # clamped
    assert str(filmstrip([])) == ""
