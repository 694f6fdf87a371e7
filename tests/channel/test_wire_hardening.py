"""Hardening of the control server (issue 8): what a client can make it hold or spend.

Pre-authentication memory (the first frame's cap, the handshake deadline, one buffer
budget per server), idle connections (the connection cap, the file-descriptor limit, one
log line when accept runs out of descriptors), the work one frame costs, and tunnels to
capabilities that listen on Unix sockets.
"""

from __future__ import annotations

import asyncio
import contextlib
import errno
import os
import socket
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest
from wire_helpers import TIMEOUT, Raw, build_env, error, frame, result, until

from proctor.channel import MAX_FIRST_FRAME, EnvServer, connect
from proctor.env import Capability

BUSY_BYTES = "server busy: too many bytes buffered"


async def open_raw(addr: tuple[str, int]) -> Raw:
    return Raw(*await asyncio.open_connection(*addr))


# --- finding 3: pre-authentication memory ------------------------------------------------------


async def test_an_unterminated_first_frame_past_64_kib_gets_an_error_and_close(raw) -> None:
    conn = await raw()
    with contextlib.suppress(ConnectionError):  # the server may stop reading first
        await conn.send(b'{"jsonrpc":"2.0","id":1,"method":"hello","params":{"p":"' + b"x" * 2**20)
    assert await conn.line() == error(None, -32600, f"frame exceeds {MAX_FIRST_FRAME} bytes")
    assert await conn.closed()


async def test_a_first_frame_must_come_within_the_handshake_timeout(env) -> None:
    server = EnvServer(env, handshake_timeout=0.3)
    addr = await server.tcp_address()
    conns: list[Raw] = []
    try:
        silent, trickle, prompt = [await open_raw(addr) for _ in range(3)]
        conns += [silent, trickle, prompt]
        await prompt.result("hello")
        began = time.monotonic()

        async def drip() -> None:
            with contextlib.suppress(ConnectionError):
                for byte in b'{"jsonrpc":"2.0","id":1,"method":"hello"' * 10:
                    await trickle.send(bytes([byte]))
                    await asyncio.sleep(0.02)

        dripping = asyncio.create_task(drip())
        refusal = error(None, -32600, "no first frame within 0.3s")
        for conn in (silent, trickle):
            assert await conn.line() == refusal
            assert await conn.closed()
        assert time.monotonic() - began < 2.0
        dripping.cancel()
        # After its first frame a connection may idle as long as it likes.
        await asyncio.sleep(0.4)
        assert await prompt.result("tasks.cancel", id=2) == {"cancelled": False}
        await until(lambda: server._sockets == 1)
    finally:
        for conn in conns:
            conn.close()
        await server.aclose()


async def test_unfinished_frames_are_bounded_across_all_connections(env) -> None:
    server = EnvServer(env, max_buffered=256 * 1024)
    addr = await server.tcp_address()
    conns = [await open_raw(addr) for _ in range(10)]
    try:
        for conn in conns:  # 60 KB each: under the first-frame cap, over the budget by 6
            await conn.send(b"{" + b"x" * 60_000)
            await asyncio.sleep(0.01)

        async def outcome(conn: Raw) -> bytes:
            with contextlib.suppress(TimeoutError):
                return await asyncio.wait_for(conn.reader.readline(), 0.3)
            return b"held"

        outcomes = [await outcome(conn) for conn in conns]
        assert outcomes == [b"held"] * 4 + [error(None, -32600, BUSY_BYTES)] * 6
        assert server._buffered == 4 * 60_001 <= server.max_buffered
        fresh = await open_raw(addr)  # a complete hello needs no buffer: still served
        conns.append(fresh)
        assert (await fresh.result("hello"))["session_id"].startswith("sess-")
        for conn in conns:
            conn.close()
        await until(lambda: server._buffered == 0 and server._sockets == 0)
    finally:
        for conn in conns:
            conn.close()
        await server.aclose()


# --- finding 5: idle connections cannot lock the server out -----------------------------------


async def test_connections_past_the_cap_are_refused_at_once(env) -> None:
    server = EnvServer(env, max_connections=3)
    addr = await server.tcp_address()
    conns = [await open_raw(addr) for _ in range(3)]
    try:
        for conn in conns:
            await conn.result("hello")
        extra = await open_raw(addr)
        conns.append(extra)
        assert await extra.line() == error(None, -32600, "server busy: too many connections")
        assert await extra.closed()
        conns[0].close()
        await until(lambda: server._sockets == 2)
        again = await open_raw(addr)
        conns.append(again)
        await again.result("hello")
    finally:
        for conn in conns:
            conn.close()
        await server.aclose()


async def test_running_out_of_descriptors_logs_one_line_and_hides_nothing_else(
    env, caplog: pytest.LogCaptureFixture
) -> None:
    loop = asyncio.get_running_loop()
    seen: list[str] = []
    loop.set_exception_handler(lambda _loop, context: seen.append(context["message"]))
    server = EnvServer(env)
    foreign = socket.socket()
    try:
        await server.tcp_address()
        exhausted = {
            "message": "socket.accept() out of system resource",
            "exception": OSError(errno.EMFILE, "Too many open files"),
            "socket": server._listeners[0].sockets[0],
        }
        for _ in range(200):  # asyncio reports every failed accept, many a second
            loop.call_exception_handler(exhausted)
        loop.call_exception_handler({"message": "something else broke"})
        loop.call_exception_handler({**exhausted, "socket": foreign})  # not our listener
        assert seen == ["something else broke", "socket.accept() out of system resource"]
        lines = [r.getMessage() for r in caplog.records if r.name == "proctor.channel"]
        assert lines == ["cannot accept connections (Too many open files); retrying every second"]
    finally:
        foreign.close()
        loop.set_exception_handler(None)
        await server.aclose()


FD_SERVER = """
import asyncio, os, resource
from proctor.channel import EnvServer
from proctor.env import Environment

resource.setrlimit(resource.RLIMIT_NOFILE, (48, 96))
env = Environment("fd-test", "1")

@env.template
async def greet(name: str = "x"):
    yield f"hi {name}"
    yield 1.0

async def main():
    # 96 descriptors: the listen backlog's first hundred connections alone use them up,
    # and they stay idle long enough (3 s) for the server to run out, whatever the load.
    server = EnvServer(env, token=os.environ.pop("FD_TOKEN"), handshake_timeout=3.0)
    _, port = await server.listen("127.0.0.1", 0)
    soft = resource.getrlimit(resource.RLIMIT_NOFILE)[0]
    print(port, soft, flush=True)
    await asyncio.Event().wait()

asyncio.run(main())
"""


async def test_idle_connections_at_a_low_fd_limit_do_not_lock_out_new_clients(
    tmp_path: Path,
) -> None:
    script = tmp_path / "fd_server.py"
    script.write_text(textwrap.dedent(FD_SERVER))
    stderr = tmp_path / "stderr.log"
    idle: list[socket.socket] = []
    with stderr.open("wb") as err:
        proc = subprocess.Popen(  # noqa: ASYNC220 - started once, then only polled
            [sys.executable, str(script)],
            stdout=subprocess.PIPE,
            stderr=err,
            env={**os.environ, "FD_TOKEN": "fd-secret"},
        )
    try:
        assert proc.stdout is not None
        line = await asyncio.wait_for(asyncio.to_thread(proc.stdout.readline), 30)
        port, soft = map(int, line.split())
        assert soft == 96  # raised from 48 to the hard limit when it first listened
        # One session first, as servers have before a flood: what the server loads lazily
        # for its first listing and start (pydantic) needs files, which it cannot open
        # once out of descriptors.
        async with connect(f"tcp://127.0.0.1:{port}", token="fd-secret", ready_timeout=30) as c:
            assert await c.start_task("greet", {"name": "warm"}) == {"prompt": "hi warm"}
            await c.list_tasks()
        for _ in range(400):  # far more than the server has descriptors, none says a word
            sock = socket.socket()
            sock.setblocking(False)
            sock.connect_ex(("127.0.0.1", port))
            idle.append(sock)
        # The server runs out of descriptors once the listen backlog's first hundred are
        # accepted and the other SYNs are retried (about a second): wait until it says so,
        # so the client below really comes in at the limit (a fixed sleep raced it).
        deadline = time.monotonic() + 30
        while "cannot accept connections" not in stderr.read_text():
            assert time.monotonic() < deadline, "the server never ran out of descriptors"
            await asyncio.sleep(0.05)
        began = time.monotonic()
        async with connect(f"tcp://127.0.0.1:{port}", token="fd-secret", ready_timeout=30) as c:
            assert [t["id"] for t in await c.list_tasks()] == ["greet"]
            assert await c.start_task("greet", {"name": "fd"}) == {"prompt": "hi fd"}
        assert time.monotonic() - began < 30
    finally:
        for sock in idle:
            sock.close()
        proc.terminate()
        proc.wait(TIMEOUT)
        if proc.stdout is not None:
            proc.stdout.close()
    log = stderr.read_text()
    assert len(log) < 2000, log[:2000]
    assert "Traceback" not in log
    assert log.count("cannot accept connections") == 1, log


# --- finding 9: the work one frame costs --------------------------------------------------------


async def test_a_1_mb_digit_run_is_answered_at_once_and_stalls_nobody(raw) -> None:
    one, other = await raw(), await raw()
    await one.result("hello")
    await other.result("hello")
    worst = 0.0
    done = asyncio.Event()

    async def ping() -> None:
        nonlocal worst
        rid = 100
        while not done.is_set():
            rid += 1
            began = time.monotonic()
            assert "tasks" in await other.result("tasks.list", id=rid)
            worst = max(worst, time.monotonic() - began)

    pinging = asyncio.create_task(ping())
    digits = b"7" * 1_000_000
    head = b'{"jsonrpc":"2.0","id":1,"method":"tasks.cancel","params":{"n":'
    for body, reply in (
        (digits, error(None, -32700, "parse error: not valid JSON")),  # beyond a double
        (b'"' + digits + b'"', result(1, {"cancelled": False})),  # a string of digits
        (b"0." + digits, result(1, {"cancelled": False})),  # a float's fraction
        (b"[" + b",".join([b"9" * 300] * 3000) + b"]", result(1, {"cancelled": False})),
    ):
        began = time.monotonic()
        await one.send(head + body + b"}}\n")
        assert await one.line() == reply
        # Bounds wide enough for a loaded machine: what this guards against (a quadratic
        # parse of a million digits) takes minutes, not seconds.
        assert time.monotonic() - began < 5
    done.set()
    await pinging
    assert worst < 5


async def test_integers_within_the_limit_cross_exactly_as_ids(raw) -> None:
    conn = await raw()
    for n in (2**64, -(10**300) - 7, int("9" * 308)):
        await conn.send({"jsonrpc": "2.0", "id": n, "method": "tasks.cancel"})
        assert await conn.line() == frame(
            {"jsonrpc": "2.0", "id": n, "result": {"cancelled": False}}
        )


# --- tunnels to capabilities on Unix sockets -----------------------------------------------------


@pytest.mark.parametrize("form", ["unix", "http+unix"])
async def test_a_tunnel_reaches_a_capability_on_a_unix_socket(probe, tmp_path, form) -> None:
    path = tmp_path / "cap.sock"
    handled: list[asyncio.Future[None]] = []

    async def echo(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        done = asyncio.get_running_loop().create_future()
        handled.append(done)
        with contextlib.suppress(ConnectionError):
            while data := await reader.read(65536):
                writer.write(data)
                await writer.drain()
        writer.close()
        done.set_result(None)

    daemon = await asyncio.start_unix_server(echo, str(path))
    url = f"unix://{path}" if form == "unix" else f"http+unix://{str(path).replace('/', '%2F')}/mcp"
    server = EnvServer(build_env(probe, [Capability("cap", "tcp", url)]))
    conn = await open_raw(await server.tcp_address())
    try:
        await conn.send({"jsonrpc": "2.0", "id": 1, "method": "tunnel.open",
                         "params": {"capability": "cap"}})  # fmt: skip
        assert await conn.line() == result(1, {"capability": "cap"})
        await conn.send(b"through the tunnel\n")
        assert await conn.line() == b"through the tunnel\n"
    finally:
        conn.close()
        await server.aclose()
        await asyncio.wait_for(asyncio.gather(*handled), TIMEOUT)  # the tunnel's end closed
        daemon.close()
        await daemon.wait_closed()
