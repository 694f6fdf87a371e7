"""The command line's shared option groups: each command that takes one reads it the same."""

from __future__ import annotations

import pytest

from proctor.cli._main import build_parser

WHERE = ["--runtime", "warm", "--env", "letters", "--env-source", "env.py", "--timeout", "5"]


@pytest.mark.parametrize(("command", "bound"), [("run", "--max-concurrent"), ("validate", "-j")])
def test_run_and_validate_read_where_environments_run_alike(command: str, bound: str) -> None:
    args = build_parser().parse_args([command, "tasks.json", *WHERE, bound, "3"])
    seen = (args.runtime, args.env, args.env_source, args.timeout, args.max_concurrent)
    assert seen == ("warm", "letters", "env.py", 5.0, 3)


@pytest.mark.parametrize(
    "argv",
    [
        ["serve", "env.py", "--host", "::1", "--port", "0", "--token-env", "T"],
        ["view", "out", "--host", "::1", "--port", "0", "--token-env", "T"],
        ["task", "start", "echo", "--url", "tcp://127.0.0.1:1", "--json"],
        ["task", "grade", "--url", "tcp://127.0.0.1:1", "--answer", "a"],
    ],
)
def test_shared_groups_parse_for_every_command_that_takes_them(argv: list[str]) -> None:
    args = build_parser().parse_args(argv)
    assert callable(args.handler)
    if "--host" in argv:
        assert (args.host, args.port, args.token_env) == ("::1", 0, "T")
    else:
        assert args.url == "tcp://127.0.0.1:1" and args.ready_timeout > 0
