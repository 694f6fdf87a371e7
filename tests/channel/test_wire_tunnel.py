"""Capability streams and the token rule, over real loopback TCP (DESIGN 3)."""

from __future__ import annotations

import asyncio
import contextlib
import hmac
import os
import socket
import struct
from collections.abc import AsyncIterator, Iterator

import pytest
from wire_helpers import TIMEOUT, Raw, build_env, error, result, until

from proctor.channel import EnvServer
from proctor.env import Capability

OPEN_ECHO = b'{"jsonrpc":"2.0","id":1,"method":"tunnel.open","params":{"capability":"echo"}}\n'


async def read_exactly(conn: Raw, n: int) -> bytes:
    return await asyncio.wait_for(conn.reader.readexactly(n), TIMEOUT)


async def test_tunnel_splices_bytes_both_ways_with_half_close(raw, server) -> None:
    conn = await raw()
    await conn.send(OPEN_ECHO + b"early bytes ")  # raw bytes may follow the preface at once
    assert await conn.line() == result(1, {"capability": "echo"})
    await conn.send(b"and \n more")
    assert await read_exactly(conn, 22) == b"early bytes and \n more"
    blob = os.urandom(1 << 20)  # enough to exercise flow control
    await conn.send(blob)
    assert await read_exactly(conn, len(blob)) == blob
    conn.writer.write_eof()  # we are done writing; the daemon still answers
    assert await conn.closed()  # the daemon's EOF came back through the tunnel
    conn.close()
    await until(lambda: not server._connections)  # both halves shut: nothing left open


async def test_tunnel_without_an_id_gets_no_reply(raw) -> None:
    conn = await raw()
    await conn.send(b'{"jsonrpc":"2.0","method":"tunnel.open","params":{"capability":"echo"}}\n')
    await conn.send(b"ping")
    assert await read_exactly(conn, 4) == b"ping"


async def test_tunnel_to_an_undeclared_capability_errors_and_closes(raw) -> None:
    conn = await raw()
    await conn.send(OPEN_ECHO.replace(b'"echo"', b'"nope"'))
    assert await conn.line() == error(1, -32602, "tunnel.open: unknown capability 'nope'")
    assert await conn.closed()


@pytest.mark.parametrize("params", [b"{}", b'{"capability":5}', b"[]", b"null"])
async def test_tunnel_with_bad_params_errors_and_closes(raw, params: bytes) -> None:
    conn = await raw()
    await conn.send(b'{"jsonrpc":"2.0","id":2,"method":"tunnel.open","params":' + params + b"}\n")
    reply = await conn.recv()
    assert reply["id"] == 2 and reply["error"]["code"] == -32602
    assert await conn.closed()


async def test_tunnel_to_an_unreachable_capability_errors_and_closes(raw, env) -> None:
    env.add_capability(Capability("ep", "tcp", "tcp://127.0.0.1:9"))  # nothing listens there
    conn = await raw()
    await conn.send(OPEN_ECHO.replace(b'"echo"', b'"ep"'))
    reply = await conn.recv()
    assert reply["id"] == 1 and reply["error"]["code"] == -32000
    assert reply["error"]["message"].startswith("tunnel.open: cannot reach 'ep': ")
    assert await conn.closed()


@pytest.mark.parametrize(
    ("name", "message"),
    [
        ("nourl", "tunnel.open: cannot reach 'nourl': '' names no host:port"),
        ("noport", "tunnel.open: cannot reach 'noport': 'x' names no host:port"),
    ],
)
async def test_tunnel_to_a_malformed_capability(raw, env, name: str, message: str) -> None:
    env.add_capability(Capability(name, "tcp", "" if name == "nourl" else "x"))
    conn = await raw()
    await conn.send(OPEN_ECHO.replace(b'"echo"', f'"{name}"'.encode()))
    assert await conn.line() == error(1, -32000, message)
    assert await conn.closed()


async def test_per_episode_data_never_becomes_a_tunnel_target(raw) -> None:
    control = await raw()
    await control.result("tasks.start", {"id": "episode"})  # publishes 'ghost' with a url
    conn = await raw()
    await conn.send(OPEN_ECHO.replace(b'"echo"', b'"ghost"'))
    assert await conn.line() == error(1, -32602, "tunnel.open: unknown capability 'ghost'")
    assert await conn.closed()


async def test_a_client_leaving_closes_the_daemon_side(raw, server) -> None:
    conn = await raw()
    await conn.send(OPEN_ECHO)
    await conn.line()
    conn.writer.transport.abort()
    await until(lambda: not server._connections)


# --- the token rule ------------------------------------------------------------------------------


@pytest.fixture
async def guarded(env) -> AsyncIterator[tuple[str, int]]:
    srv = EnvServer(env, token="s3cret-☃")
    yield await srv.listen("127.0.0.1", 0)
    await srv.aclose()


async def open_raw(addr: tuple[str, int]) -> Raw:
    return Raw(*await asyncio.open_connection(*addr))


async def test_listen_beyond_loopback_needs_a_token(env) -> None:
    srv = EnvServer(env)
    for host in ("0.0.0.0", "", "::", "10.1.2.3", "127.attacker.example", "127.0.0.1.nip.io"):
        with pytest.raises(ValueError, match="requires a token"):
            await srv.listen(host)
    await srv.aclose()


async def test_a_token_server_accepts_hello_with_the_token(guarded, monkeypatch) -> None:
    compared: list[bytes] = []
    compare = hmac.compare_digest

    def spy(a: bytes, b: bytes) -> bool:
        compared.append(a)
        return compare(a, b)

    monkeypatch.setattr(hmac, "compare_digest", spy)
    conn = await open_raw(guarded)
    hello = await conn.result("hello", {"token": "s3cret-☃"})
    assert hello["env"]["name"] == "wire-test"
    assert await conn.result("tasks.cancel") == {"cancelled": False}  # only the first frame
    assert compared == ["s3cret-☃".encode()]
    conn.close()


async def test_a_token_server_accepts_a_tunnel_with_the_token(guarded) -> None:
    conn = await open_raw(guarded)
    await conn.send(
        b'{"jsonrpc":"2.0","id":1,"method":"tunnel.open",'
        b'"params":{"capability":"echo","token":"s3cret-\\u2603"}}\nxyz'
    )
    assert await conn.line() == result(1, {"capability": "echo"})
    assert await read_exactly(conn, 3) == b"xyz"
    conn.close()


@pytest.mark.parametrize(
    "first",
    [
        b'{"jsonrpc":"2.0","id":1,"method":"hello"}',
        b'{"jsonrpc":"2.0","id":1,"method":"hello","params":{"token":"wrong"}}',
        b'{"jsonrpc":"2.0","id":1,"method":"hello","params":{"token":7}}',
        b'{"jsonrpc":"2.0","id":1,"method":"hello","params":{"token":"s3cret"}}',
        b'{"jsonrpc":"2.0","id":1,"method":"tasks.start","params":{"id":"greet"}}',
        b'{"jsonrpc":"2.0","id":1,"method":"tunnel.open","params":{"capability":"echo"}}',
    ],
)
async def test_a_first_frame_without_the_token_gets_one_error_then_close(
    guarded, first: bytes, probe
) -> None:
    conn = await open_raw(guarded)
    await conn.send(first + b"\n" + b'{"jsonrpc":"2.0","id":2,"method":"tasks.list"}\n')
    assert await conn.line() == error(1, -32600, "unauthorized: a valid token is required")
    assert await conn.closed()
    conn.close()


async def test_the_refusal_survives_a_client_that_keeps_sending(guarded) -> None:
    # Closing with unread input would reset the connection and could destroy the error
    # frame before the client reads it; the server half-closes and drains instead.
    conn = await open_raw(guarded)
    conn.writer.write(b'{"jsonrpc":"2.0","id":1,"method":"hello"}\n' + b"x" * 1_000_000)
    assert await conn.line() == error(1, -32600, "unauthorized: a valid token is required")
    assert await conn.closed()
    conn.close()


async def test_an_unparsable_first_frame_on_a_token_server(guarded) -> None:
    conn = await open_raw(guarded)
    await conn.send(b"{nope\n")
    assert await conn.line() == error(None, -32600, "unauthorized: a valid token is required")
    assert await conn.closed()
    conn.close()


@pytest.fixture
def blackhole() -> Iterator[str]:
    """A loopback address whose connects hang: a listener with a full accept queue."""
    listener = socket.socket()
    listener.bind(("127.0.0.1", 0))
    listener.listen(0)
    host, port = listener.getsockname()
    fill = [socket.socket() for _ in range(3)]
    for sock in fill:
        sock.setblocking(False)
        with contextlib.suppress(BlockingIOError):
            sock.connect((host, port))
    yield f"tcp://{host}:{port}"
    for sock in [*fill, listener]:
        sock.close()


async def test_a_client_leaving_stops_the_dial(probe, blackhole) -> None:
    server = EnvServer(build_env(probe, [Capability("stuck", "tcp", blackhole)]))
    try:
        conn = await open_raw(await server.tcp_address())
        await conn.send(OPEN_ECHO.replace(b'"echo"', b'"stuck"'))
        await until(lambda: bool(server._background))  # dialling
        # A reset, not a FIN: after a FIN the server must keep dialling to pass it on.
        sock = conn.writer.get_extra_info("socket")
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
        conn.close()
        await until(lambda: not server._background and not server._connections)
    finally:
        await server.aclose()


async def test_aclose_does_not_wait_for_a_hanging_dial(probe, blackhole) -> None:
    server = EnvServer(build_env(probe, [Capability("stuck", "tcp", blackhole)]))
    conn = await open_raw(await server.tcp_address())
    await conn.send(OPEN_ECHO.replace(b'"echo"', b'"stuck"'))
    await until(lambda: bool(server._background))
    await asyncio.wait_for(server.aclose(), 1.0)
    assert await conn.closed()
    conn.close()
