"""`CommandAgent`: a harness in any language, run as a child process per rollout."""

from __future__ import annotations

import asyncio
import contextlib
import os
import re
import signal
import time
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Literal

import orjson

from .._errors import RolloutError

if TYPE_CHECKING:
    from ..engine._run import Run

__all__ = ["CommandAgent"]

# Parent variables that look like credentials never reach a harness (better a harmless
# variable too many than a key); the proxy session's secret replaces provider keys.
_SECRET_NAME = re.compile(r"KEY|TOKEN|SECRET|PASSW|CRED|AUTH", re.I)
_TAIL = 4000


class CommandAgent:
    """Run `argv` once per rollout and take its standard output as the answer.

    The harness gets the prompt on stdin (text as is, anything else as JSON) and in
    its environment:

    - `OPENAI_BASE_URL`, `OPENAI_API_KEY`, `ANTHROPIC_BASE_URL`, `ANTHROPIC_API_KEY`:
      the run's interception-proxy session (`rollout(..., proxy=)`), so every model
      call it makes is recorded and budgeted; the key is a per-rollout secret;
    - `PROCTOR_TASK_ID`, `PROCTOR_TRACE_ID`, and `PROCTOR_CAPABILITIES`: a JSON map of
      the environment's capabilities, each routed to a local URL through the run's
      connection.

    Variables of the parent whose name mentions a credential (`KEY`, `TOKEN`,
    `SECRET`, `PASSW`, `CRED`, `AUTH`, anywhere, any case) are removed; pass what a
    harness really needs in `env`.

    Args:
        argv: the command (a list, or a string split on whitespace).
        cwd: its working directory.
        env: extra variables, applied last.
        answer: `stdout` (stripped text) or `json` (stdout parsed as JSON).
        kill_grace: seconds between SIGTERM and SIGKILL when the rollout stops it.
    """

    def __init__(
        self,
        argv: Sequence[str] | str,
        *,
        cwd: str | os.PathLike[str] | None = None,
        env: Mapping[str, str] | None = None,
        answer: Literal["stdout", "json"] = "stdout",
        kill_grace: float = 2.0,
    ) -> None:
        self.argv = argv.split() if isinstance(argv, str) else list(argv)
        if not self.argv:
            raise ValueError("CommandAgent needs a command")
        self.cwd = cwd
        self.env = dict(env or {})
        self.answer = answer
        self.kill_grace = kill_grace

    def __repr__(self) -> str:
        return f"CommandAgent({self.argv!r})"

    def environ(self, run: Run) -> dict[str, str]:
        """The harness's environment for `run`."""
        env = {k: v for k, v in os.environ.items() if not _SECRET_NAME.search(k)}
        env.update(run.model_env)
        env["PROCTOR_TASK_ID"] = run.task.id
        env["PROCTOR_TRACE_ID"] = run.trace_id
        caps = {}
        if run.client is not None and run.client.manifest is not None:
            for cap in run.client.manifest.bindings:
                routed = run.binding(cap.name)
                caps[cap.name] = {
                    "protocol": routed.protocol,
                    "url": routed.url,
                    "params": routed.params,
                }
        env["PROCTOR_CAPABILITIES"] = orjson.dumps(caps).decode()
        env.update(self.env)
        return env

    async def __call__(self, run: Run) -> None:
        prompt = run.prompt
        stdin = prompt.encode() if isinstance(prompt, str) else orjson.dumps(prompt)
        t0 = time.time()
        proc = await asyncio.create_subprocess_exec(
            *self.argv,
            stdin=asyncio.subprocess.PIPE,
            stdout=asyncio.subprocess.PIPE,
            stderr=asyncio.subprocess.PIPE,
            cwd=self.cwd,
            env=self.environ(run),
            start_new_session=True,
        )
        try:
            out, err = await proc.communicate(stdin)
        except BaseException:
            await self._kill(proc)
            raise
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(proc.pid, signal.SIGKILL)  # whatever it left running in the background
        stderr = err.decode("utf-8", "replace")[-_TAIL:]
        if proc.returncode != 0:
            run.trace.add("assistant", None, start=t0, exit_code=proc.returncode, stderr=stderr)
            raise RolloutError(f"{self.argv[0]} exited with {proc.returncode}: {stderr.strip()}")
        text = out.decode("utf-8", "replace")
        if self.answer == "json":
            try:
                value = orjson.loads(out)
            except orjson.JSONDecodeError as exc:
                raise RolloutError(f"{self.argv[0]} printed no JSON answer: {exc}") from None
        else:
            value = text.strip()
        run.trace.content = value
        run.trace.add("assistant", value, start=t0, exit_code=0, stderr=stderr)

    async def _kill(self, proc: asyncio.subprocess.Process) -> None:
        """Stop the harness and everything it started (its own process group)."""
        for sig, wait in ((signal.SIGTERM, self.kill_grace), (signal.SIGKILL, None)):
            with contextlib.suppress(ProcessLookupError):
                os.killpg(proc.pid, sig)
            try:
                await asyncio.wait_for(asyncio.shield(proc.wait()), wait)
                return
            except TimeoutError:
                continue
