"""`Repeats`: each row's repeats made on demand, iterated and indexed alike."""

from __future__ import annotations

import pytest

from proctor.engine import Repeats


def test_each_row_repeats_in_order_made_when_asked() -> None:
    made: list[tuple[str, int]] = []

    def make(row: str, repeat: int) -> str:
        made.append((row, repeat))
        return f"{row}{repeat}"

    seq = Repeats(["a", "b"], 3, make)
    assert made == [] and len(seq) == 6
    assert list(seq) == ["a1", "a2", "a3", "b1", "b2", "b3"]
    assert [seq[i] for i in range(len(seq))] == list(seq)
    assert seq[-1] == "b3" and seq[-6] == "a1"
    assert seq[1:5:2] == ["a2", "b1"] and seq[::-1][0] == "b3"
    for bad in (6, -7):
        with pytest.raises(IndexError):
            seq[bad]


def test_no_rows_or_one_repeat() -> None:
    assert list(Repeats([], 4, lambda row, k: (row, k))) == []
    assert list(Repeats(["x", "y"], 1, lambda row, k: (row, k))) == [("x", 1), ("y", 1)]
