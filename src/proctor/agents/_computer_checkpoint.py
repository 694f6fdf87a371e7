"""A `ComputerAgent` rollout's checkpoint (`run.save_checkpoint`, read back from
`run.restored`): the model-visible history with each frame by its file name in the
rollout's frames folder, the counters, and the call a turn asked for but did not see
answered. Frames stay files: a checkpoint holds names, never image bytes."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from ..models import ToolCall

__all__ = ["checkpoint", "restore"]

VERSION = 1


def checkpoint(
    messages: list[dict[str, Any]],
    folder: Path,
    *,
    turns: int,
    stats: dict[str, Any],
    in_flight: bool = False,
    pending: Sequence[ToolCall] = (),
) -> dict[str, Any]:
    """The JSON state to continue from: `messages` with frames in `folder` by name."""
    state: dict[str, Any] = {
        "computer": VERSION,
        "turns": turns,
        "messages": _rename(messages, lambda path: _name_in(path, folder)),
        "stats": stats,
        "in_flight": in_flight,
    }
    if pending:
        state["pending"] = [
            {"id": c.id, "name": c.name, "arguments": c.arguments, "raw_arguments": c.raw_arguments}
            for c in pending
        ]
    return state


def restore(
    state: dict[str, Any], folder: Path
) -> tuple[int, list[dict[str, Any]], dict[str, Any], list[ToolCall]]:
    """Turns done, the history (frames as paths in `folder` again), the counters and the
    calls left unanswered, from a checkpoint `checkpoint` made.

    Raises:
        ValueError: not a computer checkpoint, a model turn was in flight (it may have
            been charged: never resent), or a frame it names is not in `folder`.
    """
    if state.get("computer") != VERSION:
        raise ValueError("this checkpoint was not saved by a ComputerAgent; it cannot continue")
    if state.get("in_flight"):
        raise ValueError("this checkpoint has a model turn in flight; it cannot be continued")

    def path_of(name: str) -> str:
        path = folder / name
        if "/" in name or not path.is_file():
            raise ValueError(f"checkpoint: frame {name!r} is not in {folder}")
        return str(path)

    messages = _rename(list(state["messages"]), path_of)
    pending = [
        ToolCall(c["id"], c["name"], c["arguments"], c.get("raw_arguments", ""))
        for c in state.get("pending") or ()
    ]
    return int(state["turns"]), messages, dict(state.get("stats") or {}), pending


def _name_in(path: str, folder: Path) -> str:
    """A frame's file name; a path outside the folder stays (it is not the rollout's)."""
    return Path(path).name if Path(path).parent == folder else path


def _rename(value: Any, rename: Callable[[str], str]) -> Any:
    """`value` with every image part's `path` passed through `rename` (copied where it
    changes; the history is not touched)."""
    if isinstance(value, list):
        return [_rename(item, rename) for item in value]
    if not isinstance(value, dict):
        return value
    if value.get("type") == "image" and isinstance(value.get("path"), str):
        return {**value, "path": rename(value["path"])}
    return {key: _rename(item, rename) for key, item in value.items()}
