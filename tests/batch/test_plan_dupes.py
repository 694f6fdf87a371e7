"""The plan's duplicate-id check counts id prefixes, not every rollout id: it must find
exactly the duplicates a list of every id would (the planner keeps no such list, so a
100,000-rollout batch does not hold one while it plans)."""

from __future__ import annotations

from collections import Counter

from hypothesis import given
from hypothesis import strategies as st

from proctor.batch._config import BatchConfig
from proctor.batch._plan import _dupe_ids

# Slugs and names that clean to the same string, collide across the `--` separator, end
# like a repeat suffix, or pass the 120-character cut.
PARTS = ["a", "b", "a--b", "b--c", "c", "x" * 130, "x" * 130 + "y", "a/b", "a b", "-a-",
         "r1", "a--r1", "é"]  # fmt: skip
SUFFIXES = ["", "--r", "--b", "1"]


def every_id_duplicate(config: BatchConfig, slugs: list[str]) -> list[tuple[str, int]]:
    ids = [a.rollout_id for a in config.iter_assignments(slugs)]
    return [(i, c) for i, c in Counter(ids).items() if c > 1]


@given(
    slugs=st.lists(st.tuples(st.sampled_from(PARTS), st.sampled_from(SUFFIXES)), min_size=1,
                   max_size=5).map(lambda pairs: [p + s for p, s in pairs]),
    names=st.lists(st.sampled_from(PARTS), min_size=1, max_size=3),
    repeats=st.integers(1, 12),
)  # fmt: skip
def test_the_prefix_count_finds_what_a_list_of_every_id_finds(
    slugs: list[str], names: list[str], repeats: int
) -> None:
    agents = [{"kind": "python", "agent": f"m:f{i}", "name": n} for i, n in enumerate(names)]
    try:
        config = BatchConfig.model_validate(
            {"taskset": {"source": "t.jsonl"}, "agents": agents, "repeats": repeats,
             "expected_rollouts": 1, "max_concurrent": 1}
        )  # fmt: skip
    except ValueError:
        return  # names the config itself refuses (duplicates, ...)
    assert _dupe_ids(config, slugs) == every_id_duplicate(config, slugs)
