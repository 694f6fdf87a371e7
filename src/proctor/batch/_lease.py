"""`LeasedRuntime`: a batch's servers held by its lease supervisor (`_supervisor`).

A runner that holds the lease asks the supervisor for each rollout's server and
stops it when the rollout ends; if the runner is killed, the servers live on for
`grace` seconds, for a resuming runner to take the lease and continue its in-flight
rollouts from their checkpoints (their url and token come with the lease, from the
supervisor's memory over its 0600 socket: never from a file). Nothing outlives the
lease by more than the grace, and everything dies with the supervisor.
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import os
import pickle
import subprocess
import sys
from collections.abc import AsyncIterator
from contextlib import AbstractAsyncContextManager
from typing import TYPE_CHECKING, Any

import orjson

from .._errors import RuntimeLaunchError, TeardownError
from .._resource import AsyncResource
from ..runtimes import Endpoint, Runtime
from ._supervisor import READY, SOCKET

if TYPE_CHECKING:
    from ..records import Task
    from ._config import BatchConfig

__all__ = ["LeasedRuntime", "lease_of", "leased"]

_START = 60.0  # seconds for the supervisor to come up
_GONE = "the lease supervisor died"


class LeasedRuntime(Runtime, AsyncResource):
    """Servers from the batch's lease supervisor, started here if none runs.

    Args:
        out: the batch's folder (the supervisor's socket is there).
        runtime: the batch's runtime, not yet entered: the supervisor serves with a
            copy of it (pickled to it on its stdin, so it imports no batch config).
        grace: seconds the servers outlive a runner that died, and the supervisor a
            lease nobody holds.
        env: the supervisor's environment (its batch label, for `reconcile`).
        log: the file the supervisor's output is appended to (the servers' log).
    """

    def __init__(
        self, out: str, runtime: Runtime, grace: float, env: dict[str, str], log: str | None
    ) -> None:
        self.out = out
        self.runtime = runtime
        self.grace = grace
        self.env = env
        self.log = log
        self.orphans: dict[str, str | None] = {}
        """The servers a dead runner left: url -> token (`token_for`)."""
        self._proc: asyncio.subprocess.Process | None = None
        self._reader: asyncio.StreamReader | None = None
        self._writer: asyncio.StreamWriter | None = None
        self._ids = itertools.count(1)
        self._waiting: dict[int, asyncio.Future[dict[str, Any]]] = {}
        self._died: dict[str, asyncio.Future[str]] = {}
        self._listen: asyncio.Task[None] | None = None

    def __repr__(self) -> str:
        return f"LeasedRuntime({self.runtime!r}, grace={self.grace:g})"

    def __call__(self, task: Task) -> AbstractAsyncContextManager[Endpoint]:
        return self._endpoint(task)

    async def start(self) -> None:
        """Take the lease (starting the supervisor if none runs); a failed or cancelled
        start leaves no supervisor of its own behind."""
        try:
            dirfd = os.open(self.out, os.O_PATH)
            try:
                path = f"/proc/self/fd/{dirfd}/{SOCKET}"  # short, whatever the folder's length
                try:
                    self._reader, self._writer = await asyncio.open_unix_connection(path)
                except OSError:
                    await self._spawn()
                    self._reader, self._writer = await asyncio.open_unix_connection(path)
            finally:
                os.close(dirfd)
            self._listen = asyncio.ensure_future(self._listening())
            self.orphans = (await self._ask({"op": "lease"}))["orphans"]
        except BaseException:
            await self.aclose()
            raise

    async def _spawn(self) -> None:
        argv = [sys.executable, "-m", "proctor.batch._supervisor", self.out, str(self.grace)]
        err = os.open(self.log or os.devnull, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
        try:
            proc = self._proc = await asyncio.create_subprocess_exec(
                *argv, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=err,
                env=self.env, start_new_session=True,
            )  # fmt: skip
        finally:
            os.close(err)
        assert proc.stdin is not None and proc.stdout is not None
        proc.stdin.write(pickle.dumps(self.runtime))  # its own child: no trust boundary
        proc.stdin.close()
        if (await proc.stdout.readline()).strip() != READY:
            raise RuntimeLaunchError(f"the lease supervisor did not start (see {self.log})")

    def claim(self, urls: set[str]) -> None:
        """Adopt the servers a dead runner left at `urls` (their rollouts continue,
        however long they wait for a slot) and stop the others now (theirs do not)."""
        for url in self.orphans:
            self._send({"op": "adopt" if url in urls else "stop", "url": url})

    def token_for(self, url: str) -> str | None:
        """The token of a server a dead runner left (`claim`ed by this runner)."""
        return self.orphans.get(url)

    def died(self, url: str) -> asyncio.Future[str]:
        """Resolves with the cause if the adopted server at `url` dies (or the
        supervisor does), as a fresh one's `Endpoint.died`."""
        died = self._died.get(url)
        if died is None:
            died = self._died[url] = asyncio.get_running_loop().create_future()
            if self._listen is None or self._listen.done():
                died.set_result(_GONE)
        return died

    async def release(self, url: str) -> None:
        """Stop an adopted server."""
        died = self._died.pop(url, None)
        if died is not None and not died.done():
            died.cancel()
        await self._stop(url)

    async def aclose(self) -> None:
        """Stop every server and the supervisor: the lease ends with the batch."""
        self._send({"op": "close"})
        if self._listen is not None:
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(asyncio.shield(self._listen), _START)
            self._listen.cancel()
        if self._writer is not None:
            self._writer.close()
        proc, self._proc = self._proc, None
        if proc is not None:
            if self._listen is None:  # it never served this runner: nothing to stop first
                with contextlib.suppress(ProcessLookupError):
                    proc.kill()
            await _reap(proc)

    @contextlib.asynccontextmanager
    async def _endpoint(self, task: Task) -> AsyncIterator[Endpoint]:
        reply = await self._ask({"op": "start", "task": task.model_dump_json()})
        if reply.get("error"):
            raise RuntimeLaunchError(reply["error"])
        url = reply["url"]
        died = self._died[url] = asyncio.get_running_loop().create_future()
        try:
            yield Endpoint(url, token=reply["token"], died=died)
        finally:
            self._died.pop(url, None)
            if not died.done():
                died.cancel()
            await self._stop(url)

    async def _stop(self, url: str) -> None:
        try:
            error = (await self._ask({"op": "stop", "url": url})).get("error")
        except RuntimeLaunchError:
            return  # the supervisor died, and its servers with it
        if error:
            raise TeardownError(error)

    def _send(self, message: dict[str, Any]) -> None:
        if self._writer is not None and not self._writer.is_closing():
            self._writer.write(orjson.dumps(message) + b"\n")

    async def _ask(self, message: dict[str, Any]) -> dict[str, Any]:
        rid = next(self._ids)
        if self._listen is None or self._listen.done():
            raise RuntimeLaunchError(_GONE)
        reply: asyncio.Future[dict[str, Any]] = asyncio.get_running_loop().create_future()
        self._waiting[rid] = reply
        self._send({**message, "id": rid})
        try:
            return await reply
        finally:
            self._waiting.pop(rid, None)

    async def _listening(self) -> None:
        assert self._reader is not None
        try:
            async for line in self._reader:
                message = orjson.loads(line)
                if "event" in message:
                    died = self._died.get(message["url"])
                    if died is not None and not died.done():
                        died.set_result(message["cause"])
                    continue
                reply = self._waiting.get(message["id"])
                if reply is not None and not reply.done():
                    reply.set_result(message)
        except (ConnectionError, orjson.JSONDecodeError):
            pass
        finally:  # the supervisor is gone, and its servers with it
            for reply in self._waiting.values():
                if not reply.done():
                    reply.set_exception(RuntimeLaunchError(_GONE))
            for died in self._died.values():
                if not died.done():
                    died.set_result(_GONE)


def leased(
    config: BatchConfig, runtime: Runtime, batch: str, out: str, log: str
) -> LeasedRuntime | None:
    """The runtime under a lease, unless the config turns it off (`runtime.lease = 0`)
    or it cannot apply: a Ray executor's shards build their own runtime, and a harness
    placed in the substrate needs a way into its sandbox, which the supervisor does not
    hand out: such a batch runs without one (docs/batch.md, "Servers under a lease")."""
    from .._environ import allowed_environ
    from ._reconcile import BATCH_ENV

    grace, _ = lease_of(config)
    if grace is None or config.executor.kind == "ray":  # the executor holds its own lease
        return None
    env = {**allowed_environ(()), BATCH_ENV: batch}
    if config.runtime.kind == "ray":  # the supervisor is a Ray driver: address, auth token
        env.update((k, v) for k, v in os.environ.items() if k.startswith("RAY_"))
    return LeasedRuntime(out, runtime, grace, env, log)


_UNLEASED = {
    "local": "the runner's own process: nothing outlives it",
    "container": "a container outlives the runner and is adopted where it runs",
    "compose": "a Compose project outlives the runner and is adopted where it runs",
    "url": "served elsewhere: adopted where it runs",
}


def lease_of(config: BatchConfig) -> tuple[float | None, str]:
    """The grace a batch's servers get under a lease, or None, and why."""
    if config.executor.kind == "ray":
        grace = getattr(config.executor, "lease", None)
        if not grace:
            return None, "executor.lease = 0"
        return float(grace), "the Ray executor's shards are held by its lease keeper"
    grace = getattr(config.runtime, "lease", None)
    if grace is None:
        return None, _UNLEASED.get(config.runtime.kind, "recorded without a lease: none, as it ran")
    if not grace:
        return None, "runtime.lease = 0"
    if _placed(config):
        return None, "a harness is placed in the substrate, which the supervisor cannot enter"
    return float(grace), "the lease supervisor holds the servers"


def _placed(config: BatchConfig) -> bool:
    """Whether an enabled agent's harness is placed in the substrate."""
    return any(
        entry.enabled and getattr(entry, "placement", None) == "substrate"
        for entry in config.agents
    )


async def _reap(proc: asyncio.subprocess.Process) -> None:
    """Wait for the supervisor to exit; kill it if it hangs (its servers die with it)."""
    try:
        await asyncio.wait_for(proc.wait(), _START)
    except TimeoutError:
        with contextlib.suppress(ProcessLookupError):
            proc.kill()
        await proc.wait()
