"""The per-turn records serialize every field (written out by hand, for speed: a field
added later must be added there too)."""

from __future__ import annotations

from dataclasses import fields

from proctor.models import Attempt, Usage


def test_usage_to_dict_has_every_counter_and_the_total() -> None:
    usage = Usage(1, 2, 3, 4, 5)
    assert usage.to_dict() == {
        **{f.name: getattr(usage, f.name) for f in fields(Usage)},
        "total_tokens": 5,
    }


def test_attempt_to_dict_has_every_field() -> None:
    attempt = Attempt(1, "ok", 200, None, 0.0, 1.5, 0.25)
    assert attempt.to_dict() == {f.name: getattr(attempt, f.name) for f in fields(Attempt)}
