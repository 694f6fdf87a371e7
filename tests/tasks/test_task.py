"""The `Task` row: slug defaults, the args digest and the codec."""

from __future__ import annotations

import hashlib
import re

import pytest
from pydantic import ValidationError

import proctor.tasks
from proctor.records import Task, args_digest


def test_exports() -> None:
    assert proctor.tasks.__all__ == [
        "SyncPlan",
        "TaskCheck",
        "Taskset",
        "ValidationReport",
        "diff",
        "row_places",
        "sync",
        "validate",
    ]
    assert all(hasattr(proctor.tasks, name) for name in proctor.tasks.__all__)


def test_slug_is_id_alone_without_args() -> None:
    assert Task(env="e", id="add").slug == "add"


def test_slug_is_id_plus_eight_hex_of_args() -> None:
    task = Task(env="e", id="add", args={"a": 1, "b": 2})
    assert re.fullmatch(r"add-[0-9a-f]{8}", task.slug)
    assert task.slug == f"add-{args_digest({'a': 1, 'b': 2})}"


def test_digest_is_huds_sha1_of_sorted_json() -> None:
    # Pinned so a change of canonical form (which would rename every slug) is noticed:
    # HUD's rule, so a slug means the same row in both.
    assert args_digest({"b": 2, "a": 1}) == hashlib.sha1(b'{"a": 1, "b": 2}').hexdigest()[:8]
    assert args_digest({"a": 1, "b": 2}) == "1744f53e"


def test_digest_ignores_key_order_at_every_depth() -> None:
    one = {"x": {"p": 1, "q": [1, {"m": 0, "n": 1}]}, "y": "s"}
    two = {"y": "s", "x": {"q": [1, {"n": 1, "m": 0}], "p": 1}}
    assert args_digest(one) == args_digest(two)
    assert Task(env="e", id="t", args=one).slug == Task(env="e", id="t", args=two).slug


def test_digest_distinguishes_values() -> None:
    assert args_digest({"a": 1}) != args_digest({"a": 2})
    assert args_digest({"a": [1, 2]}) != args_digest({"a": [2, 1]})


def test_explicit_slug_wins() -> None:
    assert Task(env="e", id="add", args={"a": 1}, slug="mine").slug == "mine"


def test_codec_round_trip() -> None:
    task = Task(
        env="e",
        id="add",
        args={"a": 1, "nested": {"l": [1.5, None, "x"]}},
        columns={"split": "test"},
        agent_config={"max_steps": 5},
        runtime_config={"image": "python:3.12"},
    )
    assert Task.model_validate(task.model_dump()) == task
    assert Task.model_validate(task.model_dump(mode="json", exclude_none=True)) == task
    assert Task.model_validate_json(task.model_dump_json()) == task


def test_unknown_field_is_kept() -> None:
    # Foreign rows carry metadata proctor does not know: kept and written back.
    task = Task.model_validate({"env": "e", "id": "x", "extra": 1})
    assert task.model_dump(exclude_none=True) == {
        "env": "e",
        "id": "x",
        "args": {},
        "slug": "x",
        "extra": 1,
    }


def test_env_and_id_are_required() -> None:
    with pytest.raises(ValidationError) as info:
        Task.model_validate({"args": {}})
    assert {err["loc"] for err in info.value.errors()} == {("env",), ("id",)}
