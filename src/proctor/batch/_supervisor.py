"""The lease supervisor: a batch's environment servers that outlive its runner, for a while.

`python -m proctor.batch._supervisor OUT GRACE` reads the batch's runtime (pickled by
the runner that starts it, not yet entered) on stdin, enters it, listens on the Unix
socket `OUT/supervisor.sock` (mode 0600; only its own uid may talk to it) and prints
`READY`. A
runner holds the lease while it keeps a connection open; over it, it asks for a server
per rollout (`start`), stops it (`stop`), and hears when one dies (`died`). When the
connection closes without `close` (the runner was killed), its servers are kept for
`GRACE` seconds for a resuming runner to take the lease and `adopt` them (their url and
token come with the lease, never through a file); what nobody adopts within the grace
is stopped, and the supervisor stops everything and exits once no runner held the
lease for `GRACE` seconds. Its servers get SIGTERM when it dies (a parent-death
signal), so a kill -9 of the supervisor takes them too.

Messages are JSON lines: requests carry an `id` their reply repeats.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import pickle
import socket
import sys
from dataclasses import dataclass, field
from typing import Any

import orjson

__all__ = ["READY", "SOCKET", "main"]

READY = b"READY"
SOCKET = "supervisor.sock"  # in the batch's folder
_FIRST = 60.0  # seconds for the runner that started the supervisor to take the lease


@dataclass(eq=False)
class _Held:
    """One server the supervisor keeps, and who holds it."""

    url: str
    token: str | None
    owner: _Conn | None
    done: asyncio.Event = field(default_factory=asyncio.Event)
    task: asyncio.Task[Any] | None = None
    expiry: asyncio.TimerHandle | None = None


@dataclass(eq=False)
class _Conn:
    writer: asyncio.StreamWriter
    gone: bool = False  # it closed without `close`: its runner died

    def send(self, message: dict[str, Any]) -> None:
        if not self.writer.is_closing():
            self.writer.write(orjson.dumps(message) + b"\n")


class _Supervisor:
    def __init__(self, runtime: Any, grace: float) -> None:
        self.runtime = runtime
        self.grace = grace
        self.held: dict[str, _Held] = {}
        self.conns: set[_Conn] = set()
        self.over = asyncio.Event()
        self.ended = asyncio.Event()  # every server stopped
        self.lapse: asyncio.TimerHandle | None = None
        self.lapsed(max(grace, _FIRST))

    def lapsed(self, grace: float | None = None) -> None:
        """Start the countdown to the end: no runner holds the lease."""
        loop = asyncio.get_running_loop()
        self.lapse = loop.call_later(self.grace if grace is None else grace, self.over.set)

    async def serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        sock = writer.get_extra_info("socket")
        creds = sock.getsockopt(socket.SOL_SOCKET, socket.SO_PEERCRED, 12)
        if int.from_bytes(creds[4:8], sys.byteorder) != os.getuid():
            writer.close()  # another user's process: the 0600 socket should have refused it
            return
        conn = _Conn(writer)
        closed = False
        try:
            async for line in reader:
                message = orjson.loads(line)
                if message["op"] == "close":
                    closed = True
                    break
                self.request(conn, message)
        except (ConnectionError, ValueError, KeyError, TypeError):
            pass  # a broken peer (a line over 64 KiB, not JSON, not an object): drop it
        finally:
            self.conns.discard(conn)
            if closed:  # the batch is over: answer once everything stopped
                self.over.set()
                await self.ended.wait()
            else:
                self.orphan(conn)
            if not self.conns and not self.over.is_set():
                self.lapsed()
            writer.close()

    def request(self, conn: _Conn, message: dict[str, Any]) -> None:
        op, rid = message["op"], message.get("id")
        if op == "lease":
            self.conns.add(conn)
            if self.lapse is not None:
                self.lapse.cancel()
                self.lapse = None
            orphans = {h.url: h.token for h in self.held.values() if h.owner is None}
            conn.send({"id": rid, "orphans": orphans})
        elif op == "start":
            asyncio.get_running_loop().create_task(self.start(conn, rid, message["task"]))
        elif op == "adopt":
            held = self.held.get(message["url"])
            if held is not None and held.owner is None:
                held.owner = conn
                if held.expiry is not None:
                    held.expiry.cancel()
        elif op == "stop":
            asyncio.get_running_loop().create_task(self.stop(conn, rid, message["url"]))

    def orphan(self, conn: _Conn) -> None:
        """A runner went away without closing: keep its servers for the grace."""
        conn.gone = True
        for held in self.held.values():
            if held.owner is conn:
                self.orphaned(held)

    def orphaned(self, held: _Held) -> None:
        held.owner = None
        held.expiry = asyncio.get_running_loop().call_later(self.grace, held.done.set)

    async def start(self, conn: _Conn, rid: Any, task_json: str) -> None:
        from ..records import Task

        ready: asyncio.Future[_Held] = asyncio.get_running_loop().create_future()
        hold = asyncio.ensure_future(self.hold(Task.model_validate_json(task_json), ready, conn))
        try:
            held = await asyncio.shield(ready)
        except Exception as exc:
            conn.send({"id": rid, "error": f"{type(exc).__name__}: {exc}"})
            await asyncio.gather(hold, return_exceptions=True)
            return
        conn.send({"id": rid, "url": held.url, "token": held.token})

    async def hold(self, task: Any, ready: asyncio.Future[_Held], conn: _Conn) -> str | None:
        """Serve `task` until told to stop (or it dies); its teardown error, if any."""
        held: _Held | None = None
        try:
            async with self.runtime(task) as endpoint:
                held = _Held(endpoint.url, endpoint.token, conn, task=asyncio.current_task())
                self.held[held.url] = held
                ready.set_result(held)
                if conn.gone:  # its runner died while it started
                    self.orphaned(held)
                done = asyncio.ensure_future(held.done.wait())
                died = endpoint.died
                await asyncio.wait(
                    [done] if died is None else [done, died], return_when="FIRST_COMPLETED"
                )
                done.cancel()
                if died is not None and died.done() and held.owner is not None:
                    held.owner.send({"event": "died", "url": held.url, "cause": died.result()})
        except Exception as exc:
            if not ready.done():
                ready.set_exception(exc)
                return None
            return f"{type(exc).__name__}: {exc}"
        finally:
            if held is not None:
                self.held.pop(held.url, None)
        return None

    async def stop(self, conn: _Conn, rid: Any, url: str) -> None:
        held = self.held.get(url)
        if held is None or held.task is None:
            conn.send({"id": rid, "error": None})
            return
        held.done.set()
        conn.send({"id": rid, "error": await held.task})

    async def shutdown(self) -> None:
        """Stop every server still held."""
        tasks = [h.task for h in self.held.values() if h.task is not None]
        for held in list(self.held.values()):
            held.done.set()
        await asyncio.gather(*tasks, return_exceptions=True)


async def main(out: str, grace: float) -> None:
    """Serve the lease in the folder `out` until it lapses or a runner closes it."""
    runtime: Any = pickle.loads(sys.stdin.buffer.read())  # from the runner, its parent
    supervisor = _Supervisor(runtime, grace)
    dirfd = os.open(out, os.O_PATH)
    path = f"/proc/self/fd/{dirfd}/{SOCKET}"  # short, whatever the folder's length
    with contextlib.suppress(FileNotFoundError):
        os.unlink(path)
    umask = os.umask(0o177)  # the socket is 0600 from the start (not the servers' files)
    try:
        server = await asyncio.start_unix_server(supervisor.serve, path)
    finally:
        os.umask(umask)
    try:
        async with contextlib.AsyncExitStack() as stack:
            if hasattr(runtime, "__aenter__"):
                await stack.enter_async_context(runtime)
            sys.stdout.buffer.write(READY + b"\n")
            sys.stdout.flush()
            os.dup2(os.open(os.devnull, os.O_WRONLY), 1)  # the runner's pipe may close
            await supervisor.over.wait()
            await supervisor.shutdown()
    finally:
        server.close()
        with contextlib.suppress(FileNotFoundError):
            os.unlink(path)
        supervisor.ended.set()


if __name__ == "__main__":
    asyncio.run(main(sys.argv[1], float(sys.argv[2])))
    sys.stderr.flush()
    os._exit(0)  # all stopped: skip the interpreter's teardown, which the runner waits on
