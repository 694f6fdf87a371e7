"""The slowest tests, marked `slow` at collection: `pytest -m "not slow"` skips them.

Kept here, in one list, rather than as decorators spread over files that others edit:
each entry names a file and the slow tests in it (every parametrization), or none for
every test of the file, with why they are slow. Measured with
`--durations` at load ~8 on 2 cores (December 2026); CI runs them all.
`tests/test_slow_list.py` checks that every entry still names a test.
"""

from __future__ import annotations

import pytest

# FOLDER/FILE.py: (why, the slow tests' names; none: every test of the file)
SLOW: dict[str, tuple[str, tuple[str, ...]]] = {
    "batch/test_crash_resume.py": (
        "20 kill -9 trials of CLI runners (190 s)",
        ("test_kill_9_at_random_points_then_resume",),
    ),
    "batch/test_lease.py": (
        "CLI runners killed mid-agent, resumed, their servers' lease lapsed (4-8 s)",
        (
            "test_a_resume_continues_every_rollout_in_flight_at_a_kill",
            "test_nothing_outlives_a_lapsed_lease_and_a_late_resume_says_why",
            "test_an_adopted_server_that_dies_fails_its_rollout_at_once_saying_why",
            "test_the_servers_die_with_their_supervisor",
        ),
    ),
    "batch/test_plan.py": (
        "a probe image and container (10 s)",
        ("test_a_container_runtime_loads_the_environment_in_a_probe_container",),
    ),
    "compat/test_hud_examples.py": (
        "HUD's examples under HUD's server and proctor's (10-23 s each)",
        (),
    ),
    "examples/test_math_example.py": ("uv builds the math example's script venvs (18 s)", ()),
    "placement/test_placement.py": (
        "python_image, a Harbor task image and containers (10-20 s)",
        (
            "test_a_harness_in_a_container_fixes_the_file_the_task_gave_it",
            "test_a_harness_in_a_harbor_task_s_own_container_solves_it",
        ),
    ),
    "placement/test_placement_cli.py": (
        "proctor run in child processes, a python_image, a container batch (5-18 s)",
        (),
    ),
    "importers/test_cli_foreign.py": (
        "verifiers and Inspect interpreters from the CLI (11-29 s)",
        (),
    ),
    "importers/test_cli_harbor.py": (
        "Harbor task images from the CLI (38 s)",
        ("test_proctor_run_and_validate_take_a_harbor_folder",),
    ),
    "importers/test_foreign_interpreter.py": (
        "foreign interpreters from the CLI (12 s)",
        ("test_the_cli_outside_the_checkout_finds_it_or_says_in_one_line_what_is_missing",),
    ),
    "importers/test_harbor.py": (
        "a Harbor task image build (22 s)",
        ("test_the_agent_acts_in_the_container_and_test_sh_grades_it",),
    ),
    "importers/test_harbor_image.py": (
        "a venv and a task image (9 s)",
        ("test_a_venv_below_tmp_reaches_the_task_image",),
    ),
    "importers/test_verifiers.py": ("a verifiers interpreter per test (20 s each)", ()),
    "importers/test_verifiers_shapes.py": ("a verifiers interpreter per test (10-38 s each)", ()),
    "interop/test_hud_rows_interop.py": ("the HUD SDK reading and writing task files (5-13 s)", ()),
    "interop/test_interop_hud_client.py": (
        "the HUD SDK in its own interpreter (18 s to start)",
        (),
    ),
    "interop/test_interop_hud_server.py": ("a HUD server per rollout (11-16 s)", ()),
    "ray/test_ray_cluster.py": ("a two-node Ray cluster (90 s to start)", ()),
    "test_docs.py": (
        "every shell block of docs/ run verbatim (39 s)",
        ("test_every_runnable_block_runs_verbatim",),
    ),
    "test_readme.py": (
        "the README's batch example run verbatim (15 s)",
        ("test_the_batch_example_runs_verbatim",),
    ),
    "runtimes/test_container_runtime.py": (
        "containers, their image built first (13-30 s)",
        ("test_passes_the_conformance_suite",),
    ),
}


def mark(items: list[pytest.Item], root: str) -> None:
    """Add the `slow` marker to the items that `SLOW` names (`root`: the tests folder)."""
    for item in items:
        path, _, rest = item.nodeid.partition("::")
        entry = SLOW.get(path.removeprefix(root.rstrip("/") + "/"))
        if entry is not None and (not entry[1] or rest.split("[", 1)[0] in entry[1]):
            item.add_marker(pytest.mark.slow)
