"""HUD's own client drives a proctor server; runs under the peers interpreter (hud==0.6.21).

Usage: python drive_proctor.py tcp://127.0.0.1:PORT

Every check runs, whatever the others did, and the results go to stdout as one line
`INTEROP_RESULT=<json>`: a check that raised records `{"exception": "Type: message"}`
and a refused call `{"code": int, "message": str}`, so the test asserts on each part.
The server is `tests/interop/proctor_env.py` served by `python -m proctor.serve`.
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import io
import json
import logging
import re
import sys
from collections.abc import Awaitable, Callable
from typing import Any
from urllib.parse import urlsplit

import hud
import hud.clients.client as hud_client_module
from hud.agents.base import Agent
from hud.clients import HudClient, HudProtocolError
from hud.eval import Runtime, Task, Taskset, rollout
from hud.eval.run import Grade, Run

ENV = "proctor-interop"
ADD = re.compile(r"What is (-?\d+) \+ (-?\d+)\?")
RESULT_PREFIX = "INTEROP_RESULT="


class Solver(Agent):
    """Answers `add` prompts; for `episode`, echoes `slot-N` through the echo binding."""

    async def __call__(self, run: Run) -> None:
        if run.task_id == "episode":
            slot = run.bindings["echo"]["slot"]
            run.trace.content = (await echo(run.client, f"slot-{slot}".encode())).decode()
        elif match := ADD.search(run.prompt_text):
            run.trace.content = str(int(match[1]) + int(match[2]))
        else:
            run.trace.content = "anything"


def refusal(exc: HudProtocolError) -> dict[str, Any]:
    return {"code": exc.code, "message": exc.message}


async def refused(call: Awaitable[Any]) -> dict[str, Any]:
    """The error a call is expected to get (or what it returned instead)."""
    try:
        return {"unexpected_result": await call}
    except HudProtocolError as exc:
        return refusal(exc)


async def echo(client: HudClient, payload: bytes) -> bytes:
    """Send `payload` through the client's forwarder for `echo`, half-close, read it all."""
    port = urlsplit(client.binding("echo").url).port
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    try:
        writer.write(payload)
        await writer.drain()
        writer.write_eof()
        return await asyncio.wait_for(reader.read(), 10)
    finally:
        writer.close()
        with contextlib.suppress(ConnectionError):
            await writer.wait_closed()


def run_summary(run: Run) -> dict[str, Any]:
    return {
        "reward": run.reward,
        "status": run.trace.status,
        "is_error": run.grade.is_error,
        "raw": run.grade.raw,
        "errors": [step.error for step in run.trace.steps if step.error],
    }


async def session(url: str) -> dict[str, Any]:
    """One control connection: hello, list, start/grade, errors, cancel, tunnel."""
    out: dict[str, Any] = {}
    async with hud.connect(Runtime(url)) as client:
        manifest = client.manifest
        assert manifest is not None
        out["manifest"] = {
            "session_id": manifest.session_id,
            "name": manifest.server_info.name,
            "version": manifest.server_info.version,
            "bindings": [
                {"name": b.name, "protocol": b.protocol, "url": b.url, "params": b.params}
                for b in manifest.bindings
            ],
        }
        out["tasks"] = await client.list_tasks()
        out["start"] = await client.start_task("add", {"a": 2, "b": 3})
        # What connect()'s heartbeat sends every 120 s: hello with our own session id,
        # here while a task is held.
        beat = await client._call("hello", {"session_id": manifest.session_id}, reply_timeout=5)
        out["heartbeat_session_id"] = beat["session_id"]
        out["grade"] = await client.grade({"answer": "5"})
        out["grade_again"] = await refused(client.grade({"answer": "5"}))
        out["unknown_task"] = await refused(client.start_task("nope", {}))
        out["bad_args"] = await refused(client.start_task("add", {"c": 1}))
        out["boom"] = await refused(client.start_task("boom", {}))
        out["unknown_method"] = await refused(client._call("no.such.method", {}))
        await client.start_task("add", {"a": 1, "b": 1})
        await client.cancel()
        out["grade_after_cancel"] = await refused(client.grade({"answer": "2"}))
        await client.start_task("add", {"a": 40, "b": 2})
        out["second_grade"] = await client.grade({"answer": "42"})
        await client.start_task("rich", {})
        rich = await client.grade({"answer": "x"})
        grade = Grade.from_dict(rich)
        out["rich"] = {
            "raw": rich,
            "reward": grade.reward,
            "content": grade.content,
            "info": grade.info,
            "is_error": grade.is_error,
            "done": grade.done,
            "evaluation": grade.evaluation,
        }
        routed = client.binding("echo")
        out["routed_url"] = routed.url
        payload = hashlib.sha256(b"seed").digest() * 8192 + bytes(range(256))  # 256 KiB+
        got = await echo(client, payload)
        out["tunnel"] = {"sent": len(payload), "received": len(got), "equal": got == payload}
    return out


class _Warnings(logging.Handler):
    def __init__(self) -> None:
        super().__init__(logging.WARNING)
        self.messages: list[str] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.messages.append(record.getMessage())


async def heartbeat(url: str) -> dict[str, Any]:
    """connect()'s real heartbeat task, made fast, while a task is held."""
    handler = _Warnings()
    logger = logging.getLogger("hud.clients")
    logger.addHandler(handler)
    saved = hud_client_module._CONTROL_HEARTBEAT_INTERVAL_SECONDS
    hud_client_module._CONTROL_HEARTBEAT_INTERVAL_SECONDS = 0.05
    try:
        async with hud.connect(Runtime(url)) as client:
            await client.start_task("add", {"a": 1, "b": 1})
            await asyncio.sleep(0.4)
            graded = await client.grade({"answer": "2"})
    finally:
        hud_client_module._CONTROL_HEARTBEAT_INTERVAL_SECONDS = saved
        logger.removeHandler(handler)
    return {"grade": graded, "warnings": handler.messages}


async def start_and_leave(url: str, a: int, b: int) -> str:
    """Start `add` on a connection of its own and close it without grading."""
    async with hud.connect(Runtime(url)) as client:
        assert client.manifest is not None
        await client.start_task("add", {"a": a, "b": b})
        sid = client.manifest.session_id
    await asyncio.sleep(0.05)  # let the server see the close and park the task
    return sid


async def parking(url: str) -> dict[str, Any]:
    """The split start/grade flow: a later connection grades what an earlier one started."""
    out: dict[str, Any] = {}
    await start_and_leave(url, 3, 4)
    async with hud.connect(Runtime(url)) as client:
        out["adopted"] = await client.grade({"answer": "7"})

    sid = await start_and_leave(url, 5, 5)
    async with hud.connect(Runtime(url)) as client:
        resumed = await client.hello(session_id=sid)
        out["resumed_session_id"] = resumed.session_id == sid
        out["resumed"] = await client.grade({"answer": "10"})

    first = await start_and_leave(url, 1, 1)
    second = await start_and_leave(url, 2, 2)
    async with hud.connect(Runtime(url)) as client:
        out["ambiguous"] = await refused(client.grade({"answer": "2"}))
        out["ambiguous_names_both"] = first in str(out["ambiguous"]) and second in str(
            out["ambiguous"]
        )
    for sid, answer in ((first, "2"), (second, "4")):
        async with hud.connect(Runtime(url)) as client:
            await client.hello(session_id=sid)
            out[f"resumed_{answer}"] = await client.grade({"answer": answer})
    async with hud.connect(Runtime(url)) as client:
        out["nothing_parked"] = await refused(client.grade({"answer": "0"}))
    return out


async def rollouts(url: str) -> dict[str, Any]:
    """HUD's rollout() and Taskset.run() with a HUD agent against the proctor server."""
    out: dict[str, Any] = {}
    runtime = Runtime(url)
    agent = Solver()
    single = await rollout(Task(env=ENV, id="add", args={"a": 20, "b": 22}), agent, runtime=runtime)
    out["rollout"] = run_summary(single)
    out["rollout"]["answer"] = single.trace.content
    out["rollout"]["prompt"] = single.prompt
    rows = [Task(env=ENV, id="add", args={"a": i, "b": 2 * i}) for i in range(6)]
    rows.append(Task(env=ENV, id="episode", args={"slot": 11}))
    rows.append(Task(env=ENV, id="rich"))
    job = await Taskset("interop", rows).run(agent, runtime=runtime, max_concurrent=3)
    out["taskset"] = {
        "runs": {run.slug: run_summary(run) for run in job.runs},
        "count": len(job.runs),
        "errors": len(job.errors),
    }
    # A timeout while grading: HUD abandons the task (tasks.cancel mid-call, then
    # abort); the server must drop it rather than park it.
    timed = await rollout(Task(env=ENV, id="slow"), agent, runtime=runtime, rollout_timeout=1.0)
    out["timeout"] = run_summary(timed)
    out["timeout"]["stop_reason"] = timed.trace.stop_reason
    await asyncio.sleep(0.1)
    async with hud.connect(runtime) as client:
        out["after_timeout"] = await refused(client.grade({"answer": "0"}))
    return out


def cli(url: str) -> dict[str, Any]:
    """`hud task start` / `hud task grade --url` (the CLI's split flow), in this process."""
    from hud.cli.task import grade_command, start_command

    out: dict[str, Any] = {}

    def invoke(name: str, fn: Callable[[], Any]) -> None:
        echoed = io.StringIO()
        try:
            with contextlib.redirect_stdout(echoed):
                out[name] = {"result": fn(), "stdout": echoed.getvalue()}
        except HudProtocolError as exc:
            out[name] = refusal(exc)
        except Exception as exc:
            out[name] = {"exception": f"{type(exc).__name__}: {exc}"}

    invoke("start", lambda: start_command("add", None, {"a": 5, "b": 6}, url))
    invoke("grade", lambda: grade_command("add", "11", None, None, None, url))
    # Nothing held: the CLI falls back to start + grade on exactly
    # `-32600 "no task in progress"` (hud/cli/task.py grade_command).
    invoke("grade_fresh", lambda: grade_command("add", "3", None, None, {"a": 1, "b": 2}, url))
    return out


def main() -> int:
    url = sys.argv[1]
    out: dict[str, Any] = {"hud_version": hud.__version__}

    async def checks(*named: tuple[str, Callable[[str], Awaitable[dict[str, Any]]]]) -> None:
        for name, check in named:
            try:
                out[name] = await asyncio.wait_for(check(url), 30)
            except Exception as exc:
                out[name] = {"exception": f"{type(exc).__name__}: {exc}"}

    asyncio.run(
        checks(
            ("session", session),
            ("heartbeat", heartbeat),
            ("parking", parking),
            ("rollouts", rollouts),
        )
    )
    out["cli"] = cli(url)
    print(RESULT_PREFIX + json.dumps(out, default=repr), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
