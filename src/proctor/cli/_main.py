"""Argument parsing and dispatch; a user error becomes one `error: ...` line (`_usererror`)."""

from __future__ import annotations

import argparse
import os
import sys
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING

from .._usererror import print_error, print_remote_traceback, user_message
from ._batch import add_batch_parser
from ._common import Terminated
from ._export import add_export_parser
from ._tasks import add_tasks_parser

if TYPE_CHECKING:
    _Commands = argparse._SubParsersAction[argparse.ArgumentParser]

__all__ = ["build_parser", "main"]

Handler = Callable[[argparse.Namespace], int]

DEFAULT_READY_TIMEOUT = 5.0


def main(argv: Sequence[str] | None = None) -> int:
    """Run the `proctor` command; returns the exit code."""
    parser = build_parser()
    args = parser.parse_args(argv)
    handler: Handler = args.handler
    try:
        return handler(args)
    except KeyboardInterrupt:
        print_error("interrupted")
        return 130
    except Terminated:
        print_error("terminated")
        return 143
    except BrokenPipeError:
        # `proctor ... | head`: the reader left; say nothing more.
        _silence_stdout()
        return 1
    except Exception as exc:
        message = user_message(exc)
        if message is None or os.environ.get("PROCTOR_DEBUG"):
            print_remote_traceback(exc)  # the environment server's, before ours
            raise
        print_error(message)
        return 1


def _silence_stdout() -> None:
    devnull = os.open(os.devnull, os.O_WRONLY)
    try:
        os.dup2(devnull, sys.stdout.fileno())
    except (OSError, ValueError):
        pass
    finally:
        os.close(devnull)


# -- parser ---------------------------------------------------------------------------


def _positive_int(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a whole number, got {text!r}") from None
    if value < 1:
        raise argparse.ArgumentTypeError(f"must be at least 1, got {value}")
    return value


def _positive_float(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a number of seconds, got {text!r}") from None
    if not value > 0 or value == float("inf"):
        raise argparse.ArgumentTypeError(f"must be a positive number, got {text}")
    return value


def _port(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a port number, got {text!r}") from None
    if not 0 <= value <= 65535:
        raise argparse.ArgumentTypeError(f"must be between 0 and 65535, got {value}")
    return value


def _lazy(module: str, name: str) -> Handler:
    """A handler imported only when its command runs (keeps `--help` fast)."""

    def handler(args: argparse.Namespace) -> int:
        import importlib

        fn: Handler = getattr(importlib.import_module(module, __package__), name)
        return fn(args)

    return handler


def _add_json(p: argparse.ArgumentParser) -> None:
    p.add_argument("--json", action="store_true", help="print machine-readable JSON on stdout")


def _finish(p: argparse.ArgumentParser, module: str, name: str) -> None:
    """The connection options, `--json`, and the handler `module.name` of a command."""
    _add_connect(p)
    _add_json(p)
    p.set_defaults(handler=_lazy(module, name))


def _add_bind(p: argparse.ArgumentParser, token_help: str) -> None:
    """`--host`, `--port` and `--token-env` of a command that serves on a port."""
    p.add_argument("--host", default="127.0.0.1", help="address to bind (default loopback)")
    p.add_argument("--port", type=_port, default=0, help="port to bind (default: any free)")
    p.add_argument("--token-env", metavar="VAR", help=token_help)


def _add_url(p: argparse.ArgumentParser) -> None:
    p.add_argument("--url", metavar="tcp://H:P", required=True, help="a running server")


def _add_connect(p: argparse.ArgumentParser, *, token: bool = True) -> None:
    p.add_argument(
        "--ready-timeout",
        type=_positive_float,
        default=DEFAULT_READY_TIMEOUT,
        metavar="S",
        help=f"seconds to keep retrying connect + hello (default {DEFAULT_READY_TIMEOUT:g})",
    )
    if token:
        p.add_argument(
            "--token-env",
            metavar="VAR",
            help="environment variable holding the server's shared token",
        )


class _Parser(argparse.ArgumentParser):
    """A parser whose unknown arguments are its own error, shown with its own usage:
    argparse hands a subcommand's leftovers up to the top-level parser, whose usage
    (`proctor {serve,task,...}`) says nothing about the subcommand's flags."""

    def parse_known_args(  # type: ignore[override]
        self, args: Sequence[str] | None = None, namespace: argparse.Namespace | None = None
    ) -> tuple[argparse.Namespace, list[str]]:
        parsed, extras = super().parse_known_args(args, namespace)
        if extras:
            self.error(f"unrecognized arguments: {' '.join(extras)}")
        return parsed, extras


def build_parser() -> argparse.ArgumentParser:
    """The whole `proctor` command line."""
    from .. import __version__

    parser: argparse.ArgumentParser = _Parser(
        prog="proctor",
        description="Serve agent environments and run graded, traced rollouts.",
        epilog="Errors are one 'error: ...' line on stderr; PROCTOR_DEBUG=1 shows tracebacks.",
    )
    parser.add_argument("--version", action="version", version=f"proctor {__version__}")
    commands = parser.add_subparsers(title="commands", dest="command", required=True)

    _add_serve(commands)
    _add_task(commands)
    _add_run(commands)
    _add_show(commands)
    add_export_parser(commands)
    add_batch_parser(commands)
    add_tasks_parser(commands)
    _add_view(commands)
    _add_validate(commands)
    return parser


def _add_serve(commands: _Commands) -> None:
    """`proctor serve`."""
    serve = commands.add_parser(
        "serve",
        help="serve an environment on one TCP port",
        description="Run the environment's initialize hooks, bind, print exactly "
        "'PROCTOR_SERVE_PORT=<port>' on stdout (that line is the machine-readable "
        "output), serve until SIGTERM or SIGINT, then run the shutdown hooks.",
    )
    serve.add_argument("source", metavar="SOURCE[:ENV]", help="Python file or folder")
    serve.add_argument("--env", metavar="NAME", help="which environment, if SOURCE has several")
    _add_bind(serve, "environment variable holding the shared token (required off loopback)")
    serve.add_argument(
        "--unix",
        metavar="PATH",
        help="listen on a Unix socket at PATH instead of a port (prints "
        "'PROCTOR_SERVE_UNIX=<path>'; clients use unix:///PATH)",
    )
    serve.add_argument(
        "--park-ttl",
        type=_positive_float,
        default=3600.0,
        metavar="S",
        help="seconds a parked task waits to be resumed (default 3600)",
    )
    serve.add_argument(
        "--legacy-resume",
        action="store_true",
        help="HUD's resume rules, for HUD clients: a parked session resumes without its "
        "resume token and a bare 'tasks.grade' adopts the only parked task (anyone who "
        "can connect may then take it over; see docs/wire.md)",
    )
    serve.add_argument(
        "--json",
        action="store_true",
        help="after the port line, print {url, host, port, env, version} as one JSON line",
    )
    serve.add_argument(
        "--compat",
        choices=["hud"],
        help="serve a source written against HUD ('from hud import Environment') without "
        "HUD installed: its authoring names are mapped onto proctor's (docs/hud.md)",
    )
    serve.set_defaults(handler=_lazy("._serve", "cmd_serve"))


def _add_task(commands: _Commands) -> None:
    """`proctor task` and its commands."""
    task = commands.add_parser(
        "task",
        help="list, start and grade single tasks",
        description="Drive one task by hand: start it in one process, grade it in another.",
    )
    task_commands = task.add_subparsers(title="task commands", dest="task_command", required=True)
    _add_task_list(task_commands)
    _add_task_start(task_commands)
    _add_task_grade(task_commands)


def _add_task_list(commands: _Commands) -> None:
    """`proctor task list`."""
    tlist = commands.add_parser(
        "list",
        help="list an environment's task templates",
        description="Print each template's id, description and arguments.",
    )
    where = tlist.add_mutually_exclusive_group(required=True)
    where.add_argument("--source", metavar="SOURCE[:ENV]", help="serve SOURCE in this process")
    where.add_argument("--url", metavar="tcp://H:P", help="ask a running server")
    tlist.add_argument("--env", metavar="NAME", help="which environment, if SOURCE has several")
    _finish(tlist, "._task", "cmd_list")


def _add_task_start(commands: _Commands) -> None:
    """`proctor task start`."""
    tstart = commands.add_parser(
        "start",
        help="start a task, print its prompt and leave it parked on the server",
        description="Start a task and print its prompt. The connection then closes "
        "without 'bye', so the server parks the task for a later 'proctor task grade'. "
        "The session's resume token is kept in a private file (0600, in "
        "$XDG_RUNTIME_DIR/proctor/sessions or ~/.cache/proctor/sessions), never printed.",
    )
    tstart.add_argument("id", metavar="ID", help="template id (see 'proctor task list')")
    _add_url(tstart)
    tstart.add_argument(
        "--args", metavar="JSON", default="{}", help="template arguments as a JSON object"
    )
    _finish(tstart, "._task", "cmd_start")


def _add_task_grade(commands: _Commands) -> None:
    """`proctor task grade`."""
    tgrade = commands.add_parser(
        "grade",
        help="grade the parked task with an answer",
        description="Send an answer for a task parked by 'proctor task start' and "
        "print the grade: the one started last on --url, or --session's, resumed with "
        "the token 'task start' kept. With none kept (a HUD server), a fresh session "
        "asks the server to adopt its only parked task.",
    )
    _add_url(tgrade)
    answer = tgrade.add_mutually_exclusive_group(required=True)
    answer.add_argument("--answer", metavar="TEXT", help="the answer")
    answer.add_argument(
        "--answer-file",
        metavar="FILE",
        help="read the answer from FILE ('-' for stdin); one trailing newline is dropped",
    )
    tgrade.add_argument(
        "--session",
        metavar="ID",
        help="resume this parked session (from 'task start --json'; default: the last started)",
    )
    _finish(tgrade, "._task", "cmd_grade")


def _add_run(commands: _Commands) -> None:
    """`proctor run`."""
    run = commands.add_parser(
        "run",
        help="run a taskset with an agent and summarize the rewards",
        description="Roll out every row of a taskset (.py, .json, .jsonl or a folder) "
        "with an agent, print a summary per template, and record every rollout in a new "
        "output folder (the batch layout, docs/batch-layout.md; see 'proctor show').",
    )
    run.add_argument("source", metavar="SOURCE", help="taskset file or folder")
    run.add_argument(
        "--agent",
        metavar="SPEC",
        default="builtin",
        help="module:attr or path.py:attr (a class is instantiated); 'builtin' "
        "(default) is the 'agent' object SOURCE defines",
    )
    run.add_argument(
        "--group", type=_positive_int, default=1, metavar="N", help="rollouts per row (default 1)"
    )
    _add_limit(run)
    _add_where(run, "--max-concurrent")
    run.add_argument(
        "--output", metavar="FILE", help="write one JSON line per run to FILE (must be new)"
    )
    record = run.add_mutually_exclusive_group()
    record.add_argument(
        "--output-dir",
        metavar="DIR",
        help="record the run into DIR (must be new; default: a new folder "
        "./proctor-runs/<taskset>-<UTC time>-<4 hex>, or under $PROCTOR_RUNS_DIR); "
        "read it with 'proctor show'",
    )
    record.add_argument(
        "--no-record", action="store_true", help="do not record the run in an output folder"
    )
    run.add_argument(
        "--allow-invalid",
        action="store_true",
        help="skip rows that do not fit the environment's templates (default: refuse "
        "to start, listing them)",
    )
    run.add_argument("--strict", action="store_true", help="exit 1 if any run failed")
    run.add_argument(
        "-v",
        "--verbose",
        action="store_true",
        help="show every failure with its traceback (default: the first of each kind)",
    )
    _add_model_options(run)
    _finish(run, "._run", "cmd_run")


def _add_show(commands: _Commands) -> None:
    """`proctor show`."""
    show = commands.add_parser(
        "show",
        help="list a recorded run's rollouts, or print one rollout's transcript",
        description="RECORD is the folder 'proctor run' (or 'proctor batch') recorded "
        "into, or RECORD/rollouts/<id>.json to name one rollout (its record may be a line "
        "of a segment file). Without ROLLOUT: every rollout's id, "
        "status, reward and error phase. With it (an id, or its unique beginning): the "
        "prompt, model turns with tool calls, tool results, answer, grade, and the error "
        "with its traceback.",
    )
    show.add_argument("record", metavar="RECORD", help="output folder, or rollouts/<id>.json in it")
    show.add_argument("rollout", metavar="ROLLOUT", nargs="?", help="rollout id (or prefix)")
    _add_json(show)
    show.set_defaults(handler=_lazy("._show", "cmd_show"))


def _add_view(commands: _Commands) -> None:
    """`proctor view`."""
    view = commands.add_parser(
        "view",
        help="serve a dashboard of batch output folders, live while they run",
        description="Serve the batches in each OUT (an output folder, or a folder holding "
        "some) on a local web page, print exactly 'PROCTOR_VIEW_URL=<url>' on stdout, and "
        "serve until SIGTERM or SIGINT.",
    )
    view.add_argument("paths", metavar="OUT", nargs="+", help="batch output folder(s)")
    _add_bind(
        view,
        "environment variable holding the access token (required off loopback); "
        "open the page once with ?token=... to get a cookie",
    )
    view.add_argument("--open", action="store_true", help="open the page in a browser")
    view.set_defaults(handler=_lazy("._view", "cmd_view"))


def _add_validate(commands: _Commands) -> None:
    """`proctor validate`."""
    validate = commands.add_parser(
        "validate",
        help="check that a taskset's rows fit their environment; with --oracle, that "
        "each task is solved by its reference solution and not by doing nothing",
        description="Check every row of a taskset: it loads, its environment and template "
        "exist and its args bind. With --oracle, run each task twice (as 'proctor run' "
        "would): with its reference solution (the row's 'solution', else the template's), "
        "which must score 1.0, and with a null agent answering nothing, which must score "
        "below it. Prints the broken tasks with their reasons and a summary; exit 0 when "
        "every task is ok, 1 when any is broken, 2 on a usage error.",
    )
    validate.add_argument("source", metavar="TASKSET", help="taskset file or folder")
    validate.add_argument(
        "--oracle", action="store_true", help="run the reference solution and a null agent"
    )
    _add_limit(validate)
    _add_where(validate, "-j", "--max-concurrent", when=" with --oracle")
    _finish(validate, "._validate", "cmd_validate")


def _add_where(p: argparse.ArgumentParser, *concurrency: str, when: str = "") -> None:
    """Where `proctor run`'s and `proctor validate`'s environments run, within which
    deadline, and how many rollouts at a time (`concurrency` names that flag)."""
    p.add_argument(
        *concurrency,
        dest="max_concurrent",
        type=_positive_int,
        metavar="N",
        help=f"rollouts at a time{when} (default: all for local and tcp, 2 per CPU for "
        "the runtimes that start processes)",
    )
    p.add_argument(
        "--runtime",
        default="local",
        metavar="local|subprocess|warm|sandbox|sandbox-warm|tcp://H:P|unix:///P",
        help="where environments run: in this process (default), one fresh child "
        "process per rollout, one child per rollout forked from a warm pre-loaded "
        "zygote, the same two inside a bubblewrap sandbox with no network, or a "
        "server already running",
    )
    p.add_argument(
        "--env",
        metavar="NAME",
        help="which environment to serve, if the source has several (default: the one "
        "every row names)",
    )
    p.add_argument(
        "--env-source",
        metavar="PATH",
        help="Python source defining the environment (default: the taskset; needed for "
        "JSON tasksets with local or subprocess runtimes)",
    )
    p.add_argument(
        "--timeout",
        type=_positive_float,
        metavar="S",
        help="limit on each whole rollout (default: per phase, start 300 s, agent 1800 s, "
        "grade 300 s)",
    )


def _add_limit(command: argparse.ArgumentParser) -> None:
    """`--limit N`: the first N rows (a source that generates tasks without end needs it)."""
    command.add_argument(
        "--limit",
        type=_positive_int,
        metavar="N",
        help="only the first N rows (required for a source that generates tasks without "
        "end, e.g. an infinite verifiers taskset)",
    )


def _add_model_options(run: argparse.ArgumentParser) -> None:
    """`proctor run`'s models group: --model, --harness and the budgets."""
    models = run.add_argument_group(
        "models",
        "Run a model instead of a Python agent. Keys come from the provider's usual "
        "variable (OPENAI_API_KEY, ANTHROPIC_API_KEY, ...), never from arguments.",
    )
    models.add_argument(
        "--model",
        metavar="MODEL",
        help="e.g. openai/gpt-4.1-mini, anthropic/claude-haiku-4-5, "
        "vllm/Qwen3-8B@http://127.0.0.1:8000/v1; alone: the built-in tool-calling agent",
    )
    models.add_argument(
        "--harness",
        metavar="CMD",
        help="run CMD per rollout (prompt on stdin, answer on stdout) with "
        "OPENAI_BASE_URL/OPENAI_API_KEY pointing at an interception proxy in front of "
        "--model that records and budgets every turn; it runs in a bubblewrap jail "
        "(another uid, its own pid and network namespaces) with an allowlisted environment",
    )
    models.add_argument(
        "--harness-env",
        action="append",
        default=[],
        metavar="NAME",
        help="pass this variable of yours to the harness (repeatable; values never on "
        "the command line)",
    )
    models.add_argument(
        "--no-jail",
        action="store_true",
        help="run the harness as a plain child process: UNSAFE, it can then read this "
        "process's environment and keys",
    )
    models.add_argument(
        "--placement",
        choices=("jail", "substrate"),
        help="where the harness runs: in its jail beside the substrate (default), or "
        "inside each rollout's sandbox (--runtime sandbox), seeing the task's files "
        "(docs/placement.md)",
    )
    models.add_argument(
        "--ship",
        action="append",
        default=[],
        metavar="FILE",
        help="with --placement substrate: copy FILE into the substrate for each rollout "
        "(a --harness word naming it runs the copy; repeatable)",
    )
    models.add_argument(
        "--max-turns", type=_positive_int, metavar="N", help="model turns per rollout"
    )
    models.add_argument(
        "--max-tokens", type=_positive_int, metavar="N", help="input+output tokens per rollout"
    )
    models.add_argument(
        "--max-cost", type=_positive_float, metavar="USD", help="model cost per rollout"
    )
    models.add_argument(
        "--judge-model",
        metavar="MODEL",
        help="the model graders.judge rewards call, through a proxy session opened for "
        "the grading phase only (its key stays here; its cost counts on the run)",
    )
    models.add_argument(
        "--user-model",
        metavar="MODEL",
        help="the model a simulated user (ModelUser) plays, through a proxy session each "
        "rollout with a user capability gets (its key stays here; its cost counts on the run)",
    )
