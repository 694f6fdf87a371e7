"""A small, seeded run of `bench/wire_fuzz.py` (the issue 8 figure): nothing breaks.

The server runs in a child process; random and mutated frames, oversized, unterminated,
idle and slow connections all get well-formed replies (or the exact refusal), a fresh
client is served between batches, and the server's memory stays bounded.
"""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path
from types import ModuleType

BENCH = Path(__file__).resolve().parents[2] / "bench" / "wire_fuzz.py"


def load() -> ModuleType:
    spec = importlib.util.spec_from_file_location("wire_fuzz", BENCH)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules["wire_fuzz"] = module  # its dataclass looks itself up there
    spec.loader.exec_module(module)
    return module


def test_a_seeded_fuzz_run_finds_nothing_and_memory_stays_bounded() -> None:
    fuzz = load()
    args = fuzz.parse(["--frames", "2000", "--seed", "11", "--idle", "30", "--slow", "4",
                       "--big", "1"])  # fmt: skip
    figures = fuzz.run(args)
    assert figures["problems"] == [], "\n".join(figures["problems"])
    assert figures["exit_code"] == 0
    assert figures["frames_total"] >= 2000 and figures["connections"]["idle"] == 30
    assert figures["replies_checked"] >= figures["frames_total"] // 2
    assert figures["control_round_trips"] >= 3
    assert figures["rss_after_mib"] - figures["rss_before_mib"] < 64
