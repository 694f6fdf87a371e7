"""`proctor task list|start|grade`: one task at a time, by hand or from a script."""

from __future__ import annotations

import argparse
import json
import sys
from typing import Any

from ._common import CLIError, print_json, read_token, run_async, split_source, table
from ._sessions import forget, recall, remember

__all__ = ["cmd_grade", "cmd_list", "cmd_start"]


# -- list -------------------------------------------------------------------------------


def cmd_list(args: argparse.Namespace) -> int:
    """Print the templates of `--source` (served in this process) or of `--url`."""
    if args.source is not None:
        source, env_name = split_source(args.source, args.env)
        tasks = run_async(_list_local(source, env_name, args.ready_timeout))
    else:
        if args.env is not None:
            raise CLIError("--env only applies with --source")
        tasks = run_async(_list_remote(args.url, args.ready_timeout, read_token(args.token_env)))
    if args.json:
        print_json(tasks)
    elif tasks:
        rows = [
            (t.get("id", ""), t.get("description", ""), describe_args(t.get("args"))) for t in tasks
        ]
        print(table(("id", "description", "args"), rows))
    else:
        print("(no task templates)")
    return 0


async def _list_local(source: str, env_name: str | None, ready_timeout: float) -> list[Any]:
    from ..channel import EnvServer, connect
    from ..runtimes import find_environment

    env = find_environment(source, env_name)
    await env.start()
    try:
        server = EnvServer(env)
        try:
            async with connect(server, ready_timeout=ready_timeout) as client:
                return await client.list_tasks()
        finally:
            await server.aclose()
    finally:
        await env.stop()


async def _list_remote(url: str, ready_timeout: float, token: str | None) -> list[Any]:
    from ..channel import connect

    async with connect(url, ready_timeout=ready_timeout, token=token) as client:
        return await client.list_tasks()


def describe_args(schema: Any) -> str:
    """A JSON schema of arguments in one line: `word: string, n: integer = 3`."""
    if not isinstance(schema, dict):
        return ""
    props = schema.get("properties")
    if not isinstance(props, dict):
        return _type_name(schema)
    required = set(schema.get("required") or ())
    parts = []
    for name, prop in props.items():
        text = f"{name}: {_type_name(prop)}"
        if isinstance(prop, dict) and "default" in prop:
            text += f" = {json.dumps(prop['default'])}"
        elif name not in required:
            text += " (optional)"
        parts.append(text)
    if schema.get("additionalProperties") is True:
        parts.append("**kwargs")
    return ", ".join(parts)


def _type_name(schema: Any) -> str:
    if not isinstance(schema, dict) or not schema:
        return "any"
    if "$ref" in schema:
        return str(schema["$ref"]).rsplit("/", 1)[-1]
    for key in ("anyOf", "oneOf"):
        if isinstance(schema.get(key), list):
            return " | ".join(_type_name(s) for s in schema[key])
    if "enum" in schema:
        return " | ".join(json.dumps(v) for v in schema["enum"])
    kind = schema.get("type")
    if kind == "array":
        items = schema.get("items")
        return f"array[{_type_name(items)}]" if items else "array"
    if isinstance(kind, list):
        return " | ".join(map(str, kind))
    return str(kind) if kind else "any"


# -- start ------------------------------------------------------------------------------


def cmd_start(args: argparse.Namespace) -> int:
    """Start a task, print the prompt, and drop the connection so the server parks it.

    The session's resume token is kept in a private file for `task grade` (see
    `_sessions`), never printed.
    """
    task_args = parse_args_json(args.args)
    token = read_token(args.token_env)
    session_id, secret, result = run_async(
        _start(args.url, args.id, task_args, args.ready_timeout, token)
    )
    if secret is not None:
        remember(args.url, session_id, secret)
    if args.json:
        print_json(
            {
                "session_id": session_id,
                "id": args.id,
                "args": task_args,
                "prompt": result.get("prompt"),
                "result": result,
            }
        )
    else:
        prompt = result.get("prompt")
        print(prompt if isinstance(prompt, str) else json.dumps(prompt, indent=2, default=str))
        if sys.stderr.isatty():
            print(
                f"(task parked in {session_id}; grade it with: "
                f"proctor task grade --url {args.url} --answer TEXT)",
                file=sys.stderr,
            )
    return 0


def parse_args_json(text: str) -> dict[str, Any]:
    """`--args` as a JSON object.

    Raises:
        CLIError: not JSON, or not an object.
    """
    try:
        value = json.loads(text)
    except json.JSONDecodeError as exc:
        raise CLIError(f"--args is not valid JSON: {exc.msg} (column {exc.colno})") from None
    if not isinstance(value, dict):
        raise CLIError(f"--args must be a JSON object, got {type(value).__name__}")
    return value


async def _start(
    url: str, task_id: str, task_args: dict[str, Any], ready_timeout: float, token: str | None
) -> tuple[str, str | None, dict[str, Any]]:
    from ..channel import connect

    # Leaving the block closes the socket without `bye`: the server parks the task.
    async with connect(url, ready_timeout=ready_timeout, token=token) as client:
        result = await client.start_task(task_id, task_args)
        assert client.manifest is not None
        return client.manifest.session_id, client.manifest.resume_token, result


# -- grade ------------------------------------------------------------------------------


def cmd_grade(args: argparse.Namespace) -> int:
    """Grade a parked task with the answer and print the grade.

    The task is `--session`'s, else the one this user started last on `--url`, resumed
    with the token `task start` kept; with none kept, a fresh session asks the server to
    adopt its only parked task (which only a server with legacy resume allows).
    """
    answer = read_answer(args.answer, args.answer_file)
    token = read_token(args.token_env)
    from .._errors import RemoteError

    session_id, secret = recall(args.url, args.session) or (None, None)
    try:
        result = run_async(_grade(args.url, answer, session_id, secret, args.ready_timeout, token))
    except RemoteError as exc:
        if session_id is not None and exc.message.startswith("hello: unknown session"):
            if secret is not None:  # what we kept for this URL is useless now
                forget(session_id)
            whose = "" if secret else " (no resume token of yours is kept for it)"
            raise CLIError(
                f"cannot resume session {session_id}{whose}: graded, expired, or not yours"
            ) from None
        if "parked tasks" in exc.message and "hello {session_id}" in exc.message:
            hint = exc.message.replace(
                "resume one with hello {session_id}", "pick one with --session"
            )
            raise CLIError(hint) from None
        raise
    if secret is not None and session_id is not None:
        forget(session_id)
    if args.json:
        print_json(result)
        return 0
    print(f"score: {result.get('score')}")
    for key in ("content", "subscores", "info", "done", "isError"):
        value = result.get(key)
        if value not in (None, [], {}):
            shown = value if isinstance(value, str) else json.dumps(value, default=str)
            print(f"{key}: {shown}")
    return 0


def read_answer(answer: str | None, path: str | None) -> str:
    """The answer text from `--answer`, or a file / stdin minus one trailing newline."""
    if answer is not None:
        return answer
    assert path is not None
    if path == "-":
        text = sys.stdin.read()
    else:
        with open(path, encoding="utf-8") as file:
            text = file.read()
    for ending in ("\r\n", "\n"):
        if text.endswith(ending):
            return text[: -len(ending)]
    return text


async def _grade(
    url: str,
    answer: str,
    session_id: str | None,
    secret: str | None,
    ready_timeout: float,
    token: str | None,
) -> dict[str, Any]:
    from ..channel import connect

    async with connect(
        url, ready_timeout=ready_timeout, token=token, session_id=session_id, resume_token=secret
    ) as client:
        return await client.grade(answer)
